// The Strata side of strata-bench: each thread keeps `inflight` logical
// requests outstanding over its own channels and completion queue, with the
// requests built before the timed loop starts.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "bench/bench_run.h"
#include "client/ps_client.h"
#include "common/fp16.h"
#include "common/hash.h"
#include "common/pull_wire.h"
#include "common/shared_memory.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace bench {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A connection of our own: threads do not share one socket.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

// The per-shard requests of one logical batch. A shard that owns none of
// its keys gets no request (has[s] is false).
struct Entry {
  std::vector<v1::PullRequest> pulls;
  std::vector<v1::PushRequest> pushes;
  std::vector<bool> has;
  uint64_t keys = 0;
};

// Routes keys to shards exactly as PsClient does (by the cluster's shard
// map, fetched once before the run) and fills an Entry.
class RequestBuilder {
 public:
  RequestBuilder(const BenchOptions& options, const ShardMap& map)
      : options_(options),
        map_(map),
        num_shards_(static_cast<uint32_t>(options.shards.size())),
        table_hash_(HashString(options.table)),
        row_(MakeRow(options)),
        row_fp16_(row_.size()) {
    FloatsToHalves(row_.data(), row_.size(), row_fp16_.data());
  }

  void Fill(absl::Span<const uint64_t> keys, bool push, Entry& entry) const {
    std::vector<std::vector<uint64_t>> routed(num_shards_);
    for (uint64_t key : keys) {
      routed[map_.OwnerOfKey(table_hash_, key)].push_back(key);
    }
    entry.pulls.resize(push ? 0 : num_shards_);
    entry.pushes.resize(push ? num_shards_ : 0);
    entry.has.assign(num_shards_, false);
    entry.keys = keys.size();
    const v1::ValueEncoding encoding =
        options_.fp16 ? v1::FLOAT16 : v1::FLOAT32;
    for (uint32_t s = 0; s < num_shards_; ++s) {
      if (routed[s].empty()) continue;
      entry.has[s] = true;
      v1::TableBatch* batch;
      if (push) {
        entry.pushes[s].Clear();
        entry.pushes[s].set_encoding(encoding);
        entry.pushes[s].set_shard_map_version(map_.version());
        batch = entry.pushes[s].add_batches();
      } else {
        entry.pulls[s].Clear();
        entry.pulls[s].set_encoding(encoding);
        entry.pulls[s].set_shard_map_version(map_.version());
        batch = entry.pulls[s].add_batches();
      }
      batch->set_table(options_.table);
      batch->mutable_keys()->Add(routed[s].begin(), routed[s].end());
      if (push) AddGradients(routed[s].size(), *batch);
    }
  }

 private:
  void AddGradients(size_t rows, v1::TableBatch& batch) const {
    const size_t dim = row_.size();
    if (options_.fp16) {
      std::string* bytes = batch.mutable_values_fp16();
      bytes->resize(rows * dim * sizeof(uint16_t));
      for (size_t r = 0; r < rows; ++r) {
        std::memcpy(bytes->data() + r * dim * sizeof(uint16_t),
                    row_fp16_.data(), dim * sizeof(uint16_t));
      }
      return;
    }
    google::protobuf::RepeatedField<float>* values = batch.mutable_values();
    values->Reserve(static_cast<int>(rows * dim));
    for (size_t r = 0; r < rows; ++r) {
      float* out = values->AddNAlreadyReserved(static_cast<int>(dim));
      std::memcpy(out, row_.data(), dim * sizeof(float));
    }
  }

  const BenchOptions& options_;
  const ShardMap map_;
  uint32_t num_shards_;
  uint64_t table_hash_;
  std::vector<float> row_;
  std::vector<uint16_t> row_fp16_;
};

std::string RandomHex() {
  std::random_device device;
  return absl::StrFormat("%08x%08x", device(), device());
}

// One benchmark thread. Not thread-safe: it is one thread's state.
class StrataThread {
 public:
  StrataThread(const BenchOptions& options, const ShardMap& map, int index,
               std::atomic<uint64_t>* next_load_key)
      : options_(options),
        push_(options.mode != "pull"),
        load_(options.is_load()),
        builder_(options, map),
        next_load_key_(next_load_key),
        client_id_(absl::StrCat("strata-bench-", RandomHex(), "-", index)),
        slots_(static_cast<size_t>(options.inflight)) {
    for (const std::string& address : options.shards) {
      stubs_.push_back(v1::ParameterServer::NewStub(MakeChannel(address)));
    }
    if (load_) {
      pool_.resize(slots_.size());
    } else {
      pool_.resize(PoolSize(options));
      const auto batches = MakeKeyBatches(options, index, pool_.size());
      for (size_t i = 0; i < pool_.size(); ++i) {
        builder_.Fill(batches[i], push_, pool_[i]);
      }
    }
    if (!push_ && options.shared_memory_pull) OfferSharedMemory();
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].index = i;
      slots_[i].calls.resize(stubs_.size());
      for (size_t s = 0; s < stubs_.size(); ++s) {
        slots_[i].calls[s].slot = &slots_[i];
        slots_[i].calls[s].shard = s;
      }
    }
  }

  // Runs until the window is over (or a load has no keys left).
  RunResult Run(const Window& window) {
    size_t active = 0;
    for (Slot& slot : slots_) active += Issue(slot) ? 1 : 0;
    void* tag = nullptr;
    bool ok = false;
    while (active > 0 && queue_.Next(&tag, &ok)) {
      Call& call = *static_cast<Call*>(tag);
      Slot& slot = *call.slot;
      CheckCall(call);
      if (--slot.pending > 0) continue;
      const SteadyClock::time_point now = SteadyClock::now();
      if (!slot.failed) {
        window.Complete(slot.issued, now, slot.entry->keys, result_);
      }
      if (window.Over(now) || !Issue(slot)) --active;
    }
    queue_.Shutdown();
    while (queue_.Next(&tag, &ok)) {
    }
    return std::move(result_);
  }

 private:
  struct Slot;
  // One RPC to one shard.
  struct Call {
    Slot* slot = nullptr;
    size_t shard = 0;
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::PullResponse>> pull;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::PushResponse>> push;
    v1::PullResponse pull_response;
    v1::PushResponse push_response;
    grpc::Status status;
  };
  // One logical request in flight: a call to every shard it touches.
  struct Slot {
    size_t index = 0;
    uint64_t round = 0;
    Entry* entry = nullptr;
    SteadyClock::time_point issued;
    int pending = 0;
    bool failed = false;
    std::vector<Call> calls;
  };

  // The next entry of the slot; false when a load has no keys left.
  bool NextEntry(Slot& slot) {
    const size_t inflight = slots_.size();
    if (!load_) {
      const size_t rounds = pool_.size() / inflight;
      slot.entry = &pool_[slot.index + inflight * (slot.round++ % rounds)];
      return true;
    }
    const uint64_t begin = next_load_key_->fetch_add(options_.batch);
    if (begin >= options_.num_keys) return false;
    const uint64_t end = std::min(begin + options_.batch, options_.num_keys);
    std::vector<uint64_t> keys(end - begin);
    for (uint64_t k = begin; k < end; ++k) keys[k - begin] = k;
    slot.entry = &pool_[slot.index];
    builder_.Fill(keys, true, *slot.entry);
    return true;
  }

  bool Issue(Slot& slot) {
    if (!NextEntry(slot)) return false;
    Entry& entry = *slot.entry;
    const uint64_t sequence = next_sequence_++;
    slot.issued = SteadyClock::now();
    slot.pending = 0;
    slot.failed = false;
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::milliseconds(options_.timeout_ms);
    for (size_t s = 0; s < stubs_.size(); ++s) {
      if (!entry.has[s]) continue;
      Call& call = slot.calls[s];
      // The previous reader lives in the previous call's arena: drop it
      // before the context that owns that call.
      call.pull.reset();
      call.push.reset();
      call.context = std::make_unique<grpc::ClientContext>();
      call.context->set_deadline(deadline);
      if (push_) {
        // Every shard's part of one logical push shares its sequence, as
        // PsClient's do; the entry is this slot's alone while in flight.
        entry.pushes[s].set_client_id(client_id_);
        entry.pushes[s].set_sequence(sequence);
        call.push = stubs_[s]->PrepareAsyncPush(call.context.get(),
                                                entry.pushes[s], &queue_);
        call.push->StartCall();
        call.push->Finish(&call.push_response, &call.status, &call);
      } else {
        if (entry.pulls[s].has_shared_answer()) {
          OfferRegion(*shared_[s], entry.pulls[s]);
        }
        call.pull = stubs_[s]->PrepareAsyncPull(call.context.get(),
                                                entry.pulls[s], &queue_);
        call.pull->StartCall();
        call.pull->Finish(&call.pull_response, &call.status, &call);
      }
      ++slot.pending;
    }
    return true;
  }

  // Gives each shard on this machine a memory of one region per slot, and
  // every pull the region of the slot that sends it (entry i goes out from
  // slot i % inflight), as PsClient's shared memory pulls do.
  void OfferSharedMemory() {
    const size_t inflight = slots_.size();
    constexpr size_t kHeader = 4096;
    const size_t region =
        (options_.batch * size_t{options_.dim} * options_.bytes_per_value() +
         kHeader + kSharedAnswerClaimBytes + kSharedAnswerAlignment - 1) /
        kSharedAnswerAlignment * kSharedAnswerAlignment;
    shared_.resize(options_.shards.size());
    for (size_t s = 0; s < options_.shards.size(); ++s) {
      if (!IsLoopbackAddress(options_.shards[s])) continue;
      absl::StatusOr<std::unique_ptr<SharedMemory>> memory =
          SharedMemory::Create(kHeader + inflight * region);
      if (!memory.ok()) continue;
      shared_[s] = *std::move(memory);
      const std::string token = RandomHex() + RandomHex();
      std::memcpy(shared_[s]->data(), token.data(), kSharedAnswerTokenBytes);
      for (size_t i = 0; i < pool_.size(); ++i) {
        if (!pool_[i].has[s]) continue;
        v1::SharedAnswer& answer = *pool_[i].pulls[s].mutable_shared_answer();
        answer.set_path(shared_[s]->path());
        answer.set_size(shared_[s]->size());
        answer.set_token(token.substr(0, kSharedAnswerTokenBytes));
        answer.set_offset(kHeader + (i % inflight) * region);
        answer.set_capacity(region);
      }
    }
    shared_rows_.resize(inflight);
  }

  // Sets the claim word of the request's region to a new generation, as
  // PsClient does before each pull. (A failed pull's region is offered
  // again without waiting for the shard to finish writing it: the bench
  // counts failures and checks only the answers' sizes.)
  void OfferRegion(SharedMemory& memory, v1::PullRequest& pull) {
    v1::SharedAnswer& region = *pull.mutable_shared_answer();
    const uint64_t word =
        SharedAnswerClaimWord(++claim_generation_, SharedAnswerClaim::kOffered);
    StoreSharedAnswerClaim(memory.data() + region.offset(), word);
    region.set_claim(word);
  }

  // The values of a pull answered in shared memory, copied out as
  // PsClient copies them into its caller's rows; their count.
  size_t ReadSharedAnswer(const Call& call) {
    const v1::PullRequest& request = call.slot->entry->pulls[call.shard];
    const v1::SharedAnswer& region = request.shared_answer();
    const uint64_t bytes = call.pull_response.shared_answer_bytes();
    if (shared_[call.shard] == nullptr ||
        bytes > region.capacity() - kSharedAnswerClaimBytes) {
      return 0;
    }
    grpc::Slice slice(
        shared_[call.shard]->data() + region.offset() + kSharedAnswerClaimBytes,
        static_cast<size_t>(bytes), [](void*) {}, nullptr);
    const grpc::ByteBuffer answer(&slice, 1);
    PullResponseReader reader(answer);
    size_t value_bytes = 0;
    bool fp16 = false;
    if (!reader.NextBatch(&value_bytes, &fp16).ok()) return 0;
    std::vector<uint8_t>& rows = shared_rows_[call.slot->index];
    rows.resize(value_bytes);
    if (!reader.ReadValues(rows.data(), value_bytes).ok()) return 0;
    ++result_.shared_answers;
    return value_bytes / options_.bytes_per_value();
  }

  // Counts a failed call or a pull answer of the wrong size.
  void CheckCall(const Call& call) {
    Slot& slot = *call.slot;
    if (!call.status.ok()) {
      slot.failed = true;
      result_.AddError(absl::StatusCodeToString(static_cast<absl::StatusCode>(
                           call.status.error_code())),
                       call.status.error_message());
      return;
    }
    if (push_) return;
    const v1::PullRequest& request = slot.entry->pulls[call.shard];
    const size_t expected =
        static_cast<size_t>(request.batches(0).keys_size()) * options_.dim;
    const v1::PullResponse& response = call.pull_response;
    const size_t got =
        response.shared_answer_bytes() > 0 ? ReadSharedAnswer(call)
        : response.batches_size() != 1     ? 0
        : options_.fp16
            ? response.batches(0).values_fp16().size() / sizeof(uint16_t)
            : static_cast<size_t>(response.batches(0).values_size());
    if (got != expected) {
      slot.failed = true;
      result_.AddError(
          "BAD_RESPONSE",
          absl::StrCat("shard ", options_.shards[call.shard], " answered ", got,
                       " values, not ", expected));
    }
  }

  const BenchOptions& options_;
  const bool push_;
  const bool load_;
  RequestBuilder builder_;
  std::atomic<uint64_t>* next_load_key_;
  std::string client_id_;
  uint64_t next_sequence_ = 1;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
  grpc::CompletionQueue queue_;
  std::vector<Entry> pool_;
  std::vector<Slot> slots_;
  // Per shard; null where pulls go over gRPC only.
  std::vector<std::unique_ptr<SharedMemory>> shared_;
  uint64_t claim_generation_ = 0;
  // Per slot: where a shared answer's values are copied.
  std::vector<std::vector<uint8_t>> shared_rows_;
  RunResult result_;
};

// Checks the table, creating it for a load; returns the cluster's shard map.
absl::StatusOr<ShardMap> PrepareTable(const BenchOptions& options) {
  PsClientOptions client_options;
  client_options.shard_addresses = options.shards;
  client_options.rpc_timeout = absl::Milliseconds(options.timeout_ms);
  client_options.retry_deadline = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<PsClient>> client =
      PsClient::Create(client_options);
  if (!client.ok()) return client.status();
  // A server that serves no shard map (the transport ceiling's stand-in)
  // is routed by the first map.
  if (absl::Status refreshed = (*client)->RefreshShardMap();
      !refreshed.ok() && !absl::IsUnimplemented(refreshed)) {
    return refreshed;
  }
  const ShardMap map = *(*client)->shard_map();
  absl::StatusOr<std::vector<v1::TableInfo>> tables = (*client)->ListTables();
  if (!tables.ok()) return tables.status();
  for (const v1::TableInfo& info : *tables) {
    if (info.config().name() != options.table) continue;
    if (info.config().dim() != options.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", options.table, "' has dim ",
                       info.config().dim(), ", not --dim=", options.dim));
    }
    return map;
  }
  if (!options.is_load()) {
    return absl::NotFoundError(
        absl::StrCat("no table '", options.table, "': run --mode=load first"));
  }
  v1::TableConfig config;
  config.set_name(options.table);
  config.set_dim(options.dim);
  v1::OptimizerType type = v1::ADAGRAD;
  v1::OptimizerType_Parse(absl::AsciiStrToUpper(options.optimizer), &type);
  config.mutable_optimizer()->set_type(type);
  config.mutable_initializer()->set_type(v1::UNIFORM);
  config.set_seed(options.seed);
  if (absl::Status created = (*client)->CreateTable(config); !created.ok()) {
    return created;
  }
  return map;
}

}  // namespace

absl::StatusOr<RunResult> RunStrata(const BenchOptions& options) {
  absl::StatusOr<ShardMap> map = PrepareTable(options);
  if (!map.ok()) return map.status();
  // Build every thread's requests before any clock starts.
  std::atomic<uint64_t> next_load_key{0};
  std::vector<std::unique_ptr<StrataThread>> workers;
  for (int t = 0; t < options.threads; ++t) {
    workers.push_back(
        std::make_unique<StrataThread>(options, *map, t, &next_load_key));
  }
  return RunThreads(options, workers.size(), [&](size_t t, const Window& w) {
    return workers[t]->Run(w);
  });
}

}  // namespace bench
}  // namespace strata
