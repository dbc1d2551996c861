#include "server/shard_service.h"

#include <unistd.h>

#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/file_system.h"
#include "common/fp16.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/pull_wire.h"
#include "common/raw_message.h"
#include "common/status_macros.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "proto/shard_map_proto.h"
#include "server/internal/bucket_move_source.h"
#include "server/internal/push_batches.h"
#include "server/internal/reused_request.h"
#include "server/internal/shared_answers.h"
#include "server/internal/subscription.h"
#include "server/replication/replica_group.h"
#include "server/shard_map_store.h"
#include "server/shard_placement.h"
#include "server/table_config_proto.h"

namespace strata {

namespace {

// No exception crosses an RPC handler: an allocation that fails while a
// request is served costs that request RESOURCE_EXHAUSTED, not the process.
// (Locks are scoped, so none stays held.)
template <typename Body>
absl::Status RunCatchingOutOfMemory(const Body& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "the shard ran out of memory serving this request");
  }
}

v1::TableInfo TableInfoFromStats(const TableStats& stats) {
  v1::TableInfo info;
  *info.mutable_config() = TableConfigToProto(stats.config);
  info.set_num_rows(stats.num_rows);
  info.set_memory_bytes(stats.memory_bytes);
  info.set_admitted_keys(stats.admitted_keys);
  info.set_rejected_gradients(stats.rejected_gradients);
  info.set_evicted_rows(stats.evicted_rows);
  info.set_rows_in_memory(stats.rows_in_memory);
  return info;
}

void FillReplicaGroupInfo(const ReplicaGroupStatus& status,
                          v1::ReplicaGroupInfo* info) {
  info->set_replica_id(status.replica_id);
  info->set_primary(status.primary);
  info->set_term(status.term);
  info->set_primary_id(status.primary_id);
  info->set_primary_address(status.primary_address);
  info->set_position_term(status.position.term);
  info->set_position_sequence(status.position.sequence);
  info->set_lease_valid(status.lease_valid);
  info->set_failovers(status.failovers);
  info->set_ack_mode(status.ack_mode);
  info->set_replicas(status.replicas);
  for (const auto& [follower, sequence] : status.follower_sequences) {
    v1::FollowerInfo* out = info->add_followers();
    out->set_replica_id(follower);
    out->set_acknowledged_sequence(sequence);
  }
}

// A refusal for another shard map carries the shard's version to the client
// as trailing metadata (common/shard_map.h).
void AddShardMapVersion(grpc::CallbackServerContext* context,
                        const absl::Status& status) {
  if (std::optional<uint64_t> version = ShardMapVersionOf(status)) {
    context->AddTrailingMetadata(kShardMapVersionMetadata,
                                 absl::StrCat(*version));
  }
}

// A stream refused before it started: finishes with `status` at once.
class RefusedStream final : public grpc::ServerWriteReactor<v1::ChangeBatch> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// Metadata values must be printable ASCII.
std::string PrintableAscii(std::string text) {
  for (char& c : text) {
    if (c < 0x20 || c > 0x7E) c = '?';
  }
  return text;
}

}  // namespace

ShardService::ShardService(const ShardServiceOptions& options)
    : options_(options),
      start_time_(options.clock->Now()),
      map_(options.shard_map != nullptr
               ? options.shard_map
               : std::make_shared<const ShardMap>(
                     ShardMap::Modulo(options.num_shards))),
      moves_(std::make_unique<server_internal::BucketMoveSource>(
          options.clock, options.max_move_pause)),
      queue_(std::make_unique<WorkQueue>(WorkQueue::Options{
          options.request_threads, options.max_queued_requests,
          absl::ToChronoNanoseconds(options.max_queue_wait),
          /*serve_inline_when_idle=*/true, options.request_thread_nice})) {
  if (options.shared_memory_answers) {
    server_internal::SharedAnswersOptions shared;
    shared.max_memories = options.max_shared_memories;
    shared.clock = options.clock;
    shared_answers_ = std::make_unique<server_internal::SharedAnswers>(shared);
  }
}

ShardService::~ShardService() { queue_.reset(); }

size_t ShardService::shared_memories() const {
  return shared_answers_ != nullptr ? shared_answers_->memories() : 0;
}

absl::Status ShardService::Authorize(grpc::CallbackServerContext* context,
                                     ShardMethod method) const {
  // A follower of a replica group answers only Stats (and health and
  // replication, other services) until it is promoted.
  if (options_.replica_group != nullptr && method != ShardMethod::kStats) {
    STRATA_RETURN_IF_ERROR(options_.replica_group->CheckPrimary());
  }
  switch (method) {
    case ShardMethod::kCreateTable:
    case ShardMethod::kPush:
    case ShardMethod::kCheckpoint:
    case ShardMethod::kRestore:
    case ShardMethod::kSubscribe:
    case ShardMethod::kSetShardMap:
    case ShardMethod::kMoveBuckets:
      return CheckBearerToken(context->client_metadata(), options_.auth_token,
                              RequestMetrics::MethodName(method));
    case ShardMethod::kPull:
    case ShardMethod::kListTables:
    case ShardMethod::kStats:
    case ShardMethod::kGetShardMap:
      if (!options_.auth_reads) return absl::OkStatus();
      return CheckBearerToken(context->client_metadata(), options_.auth_token,
                              RequestMetrics::MethodName(method));
    default:
      return absl::OkStatus();
  }
}

template <typename Body>
grpc::ServerUnaryReactor* ShardService::Run(
    grpc::CallbackServerContext* context, ShardMethod method, Body body) {
  const absl::Time start = options_.clock->Now();
  absl::Status status = Authorize(context, method);
  if (status.ok()) status = RunCatchingOutOfMemory(body);
  metrics_.Record(method, status.code(), options_.clock->Now() - start);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  AddShardMapVersion(context, status);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

template <typename Request, typename Response, typename Body>
grpc::ServerUnaryReactor* ShardService::RunTyped(
    grpc::CallbackServerContext* context, ShardMethod method,
    const grpc::ByteBuffer* request_bytes, grpc::ByteBuffer* response_bytes,
    Body body) {
  return Run(context, method, [&]() -> absl::Status {
    Request request;
    STRATA_RETURN_IF_ERROR(ParseRequest(
        *request_bytes, RequestMetrics::MethodName(method), &request));
    Response response;
    STRATA_RETURN_IF_ERROR(body(request, response));
    SerializeResponse(response, response_bytes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ShardService::RunQueued(
    grpc::CallbackServerContext* context, ShardMethod method,
    std::function<absl::Status()> body) {
  const absl::Time start = options_.clock->Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [this, context, reactor, method,
                 start](const absl::Status& status) {
    metrics_.Record(method, status.code(), options_.clock->Now() - start);
    AddShardMapVersion(context, status);
    reactor->Finish(ToGrpcStatus(status));
  };
  if (absl::Status authorized = Authorize(context, method); !authorized.ok()) {
    finish(authorized);
    return reactor;
  }
  // A pull only reads rows, so it is served on gRPC's thread when the pool
  // is idle (no hand-over to a request thread and back); the other calls
  // may wait on the disk (a push under sync or group durability, a
  // checkpoint) and always go to a request thread.
  queue_->SubmitCall(
      context->deadline(), [context] { return context->IsCancelled(); },
      [body = std::move(body)] { return RunCatchingOutOfMemory(body); },
      std::move(finish), "request",
      /*may_serve_inline=*/method == ShardMethod::kPull);
  return reactor;
}

absl::Status ShardService::CheckBatchSizes(
    const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches,
    const char* what) const {
  if (batches.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " request holds no table batch"));
  }
  uint64_t total = 0;
  for (const v1::TableBatch& batch : batches) {
    if (batch.keys().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " batch of table '", batch.table(), "' holds no keys"));
    }
    total += static_cast<uint64_t>(batch.keys_size());
  }
  if (total > options_.max_keys_per_request) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " request holds ", total, " keys, over the maximum of ",
        options_.max_keys_per_request, " (--max_keys_per_request)"));
  }
  return absl::OkStatus();
}

std::shared_ptr<const ShardMap> ShardService::shard_map() const {
  absl::MutexLock lock(&map_mu_);
  return map_;
}

void ShardService::InstallMapLocked(std::shared_ptr<const ShardMap> map) {
  // Waits for the pushes between their routing check and their apply, so
  // that none is applied under a map that no longer gives it its keys.
  absl::WriterMutexLock gate(&push_gate_);
  absl::MutexLock lock(&map_mu_);
  map_ = std::move(map);
}

absl::Status ShardService::CatchUpMapAfterPromotion() {
  ReplicaGroup* group = options_.replica_group;
  if (group == nullptr || options_.shard_map_store == nullptr ||
      group->IsPrimaryOf(map_read_in_term_.load())) {
    return absl::OkStatus();
  }
  const ReplicaGroupStatus status = group->GetStatus();
  if (!status.primary) return absl::OkStatus();
  absl::MutexLock set_lock(&set_map_mu_);
  // Another request may have read it meanwhile.
  if (group->IsPrimaryOf(map_read_in_term_.load())) return absl::OkStatus();
  absl::StatusOr<ShardMap> stored = options_.shard_map_store->Read();
  if (!stored.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "this replica became primary and cannot read the shard map from ",
        options_.shard_map_store->Where(),
        " yet: ", stored.status().message()));
  }
  if (stored->version() > shard_map()->version()) {
    STRATA_LOG(INFO, "server")
        << "primary now: shard map " << stored->Summary() << " read from "
        << options_.shard_map_store->Where();
    InstallMapLocked(std::make_shared<const ShardMap>(*std::move(stored)));
  }
  map_read_in_term_.store(status.term);
  return absl::OkStatus();
}

void ShardService::LookForNewerMap(uint64_t request_version) {
  if (options_.shard_map_store == nullptr ||
      request_version <= shard_map()->version()) {
    return;
  }
  // At most one look every 100 ms, whatever versions requests name.
  const int64_t now = absl::ToUnixNanos(options_.clock->Now());
  int64_t last = last_map_lookup_ns_.load();
  if (now - last < absl::ToInt64Nanoseconds(absl::Milliseconds(100)) ||
      !last_map_lookup_ns_.compare_exchange_strong(last, now)) {
    return;
  }
  absl::MutexLock set_lock(&set_map_mu_);
  absl::StatusOr<ShardMap> stored = options_.shard_map_store->Read();
  if (!stored.ok() || stored->version() <= shard_map()->version() ||
      options_.shard_index >= stored->num_shards()) {
    return;
  }
  STRATA_LOG(INFO, "server")
      << "shard map " << stored->Summary() << " read from "
      << options_.shard_map_store->Where();
  InstallMapLocked(std::make_shared<const ShardMap>(*std::move(stored)));
}

absl::Status ShardService::CheckRouting(
    uint64_t request_version,
    const google::protobuf::RepeatedPtrField<v1::TableBatch>& batches,
    const ShardMap& map) const {
  if (request_version != 0 && request_version < map.version()) {
    return ShardMapMismatchError(
        absl::StrCat("the request was routed by shard map version ",
                     request_version, ", but this shard serves version ",
                     map.version(), ": fetch the map again and re-route"),
        map.version());
  }
  for (const v1::TableBatch& batch : batches) {
    absl::Status owned = CheckOwnership(batch, map);
    if (owned.ok()) continue;
    // Routed by a newer map this shard has not got yet: refreshing cannot
    // help the client, waiting for the map to arrive here can.
    if (request_version > map.version()) {
      return absl::UnavailableError(absl::StrCat(
          owned.message(), "; the request was routed by shard map version ",
          request_version, ", which this shard has not got yet: retry"));
    }
    return owned;
  }
  return absl::OkStatus();
}

absl::Status ShardService::CheckOwnership(const v1::TableBatch& batch,
                                          const ShardMap& map) const {
  if (map.num_shards() <= 1) return absl::OkStatus();
  const uint64_t table_hash = HashString(batch.table());
  for (uint64_t key : batch.keys()) {
    const uint32_t bucket = BucketOf(table_hash, key);
    const uint32_t owner = map.OwnerOf(bucket);
    if (owner != options_.shard_index) {
      return ShardMapMismatchError(
          absl::StrCat("key ", key, " of table '", batch.table(),
                       "' is in bucket ", bucket, ", owned by shard ", owner,
                       " under shard map version ", map.version(),
                       ", not by this shard ", options_.shard_index,
                       ": the client routes with another shard map"),
          map.version());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointInfo> ShardService::CheckpointUnderMap(
    const v1::CheckpointRequest& request) {
  const std::string id = request.checkpoint_id().empty()
                             ? absl::StrCat("step-", request.global_step())
                             : request.checkpoint_id();
  absl::MutexLock set_lock(&set_map_mu_);
  STRATA_ASSIGN_OR_RETURN(
      CheckpointInfo info,
      request.incremental()
          ? options_.store->CheckpointIncremental(id, request.global_step())
          : options_.store->Checkpoint(id, request.global_step()));
  if (options_.data_dir.empty()) return info;
  if (absl::Status recorded =
          WriteCheckpointShardMap(*FileSystem::Default(), options_.data_dir,
                                  info.checkpoint_id, *shard_map());
      !recorded.ok()) {
    return absl::InternalError(absl::StrCat(
        "checkpoint '", info.checkpoint_id,
        "' was taken, but the shard map it was taken under could not be "
        "recorded beside it: ",
        recorded.message()));
  }
  return info;
}

absl::Status ShardService::CheckRestorableMap(const std::string& id) {
  if (options_.data_dir.empty()) return absl::OkStatus();
  absl::StatusOr<ShardMap> taken_under =
      ReadCheckpointShardMap(*FileSystem::Default(), options_.data_dir, id);
  // A checkpoint from before maps were recorded, or none of that id (the
  // store names it).
  if (absl::IsNotFound(taken_under.status())) return absl::OkStatus();
  if (!taken_under.ok()) return taken_under.status();
  const std::shared_ptr<const ShardMap> current = shard_map();
  if (taken_under->num_shards() == current->num_shards() &&
      taken_under->owners() == current->owners()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint '", id, "' was taken under shard map ",
      taken_under->Summary(),
      ", which places buckets otherwise than this shard's ", current->Summary(),
      ": restoring it here would leave rows where no client looks for them. "
      "Restore it onto new shards with stratactl reshard-checkpoint"));
}

absl::Status ShardService::DoSetShardMap(const v1::SetShardMapRequest& request,
                                         v1::SetShardMapResponse& response) {
  absl::StatusOr<ShardMap> parsed = ShardMapFromProto(request.map());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetShardMap: ", parsed.status().message()));
  }
  absl::MutexLock set_lock(&set_map_mu_);
  const std::shared_ptr<const ShardMap> current = shard_map();
  if (*parsed == *current) {
    response.set_changed(false);
    return absl::OkStatus();
  }
  if (options_.shard_index >= parsed->num_shards()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SetShardMap: the map given has ", parsed->num_shards(),
        " shards, which leaves out this shard ", options_.shard_index,
        " (a shard leaves the cluster once it owns no bucket; stop it)"));
  }
  STRATA_RETURN_IF_ERROR(
      moves_->CheckGiveAway(*current, *parsed, options_.shard_index));
  // In etcd, another shard (or replica) of the cluster may have stored this
  // very map already: it is taken from there, not written again.
  if (options_.shard_map_store != nullptr) {
    absl::StatusOr<ShardMap> stored = options_.shard_map_store->Read();
    if (stored.ok() && *stored == *parsed) {
      STRATA_LOG(INFO, "server")
          << "shard map " << current->Summary() << " replaced by "
          << parsed->Summary() << ", as stored in "
          << options_.shard_map_store->Where();
      STRATA_RETURN_IF_ERROR(RecordShardCount(*current, *parsed));
      InstallMapLocked(std::make_shared<const ShardMap>(*std::move(parsed)));
      response.set_changed(true);
      return absl::OkStatus();
    }
  }
  if (parsed->version() <= current->version()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SetShardMap: the map given has version ", parsed->version(),
        ", not above this shard's ", current->Summary()));
  }
  if (options_.shard_map_store != nullptr) {
    // Kept before it is used: a restart serves the same map.
    STRATA_RETURN_IF_ERROR(
        options_.shard_map_store->Replace(*current, *parsed));
  }
  STRATA_RETURN_IF_ERROR(RecordShardCount(*current, *parsed));
  STRATA_LOG(INFO, "server") << "shard map " << current->Summary()
                             << " replaced by " << parsed->Summary();
  InstallMapLocked(std::make_shared<const ShardMap>(*std::move(parsed)));
  response.set_changed(true);
  return absl::OkStatus();
}

absl::Status ShardService::RecordShardCount(const ShardMap& current,
                                            const ShardMap& next) {
  if (next.num_shards() == current.num_shards() || options_.data_dir.empty()) {
    return absl::OkStatus();
  }
  FileSystem& files = *FileSystem::Default();
  absl::StatusOr<ShardPlacement> placement =
      ReadShardPlacement(files, options_.data_dir);
  if (absl::IsNotFound(placement.status())) return absl::OkStatus();
  STRATA_RETURN_IF_ERROR(placement.status());
  placement->num_shards = next.num_shards();
  STRATA_RETURN_IF_ERROR(
      WriteShardPlacement(files, options_.data_dir, *placement));
  STRATA_LOG(INFO, "server")
      << "the cluster has " << next.num_shards() << " shards now (was "
      << current.num_shards()
      << "): restart this shard with --num_shards=" << next.num_shards();
  return absl::OkStatus();
}

absl::Status ShardService::DoCreateTable(const v1::CreateTableRequest& request,
                                         v1::CreateTableResponse& response) {
  STRATA_ASSIGN_OR_RETURN(EmbeddingTableConfig config,
                          TableConfigFromProto(request.config()));
  auto create = [&]() { return options_.store->CreateTable(config); };
  STRATA_ASSIGN_OR_RETURN(bool created,
                          options_.replica_group != nullptr
                              ? options_.replica_group->ReplicateCreateTable(
                                    request.config(), create)
                              : create());
  response.set_created(created);
  return absl::OkStatus();
}

absl::StatusOr<grpc::ByteBuffer> ShardService::DoPull(
    const v1::PullRequest& request, std::string* shared_refusal) {
  STRATA_RETURN_IF_ERROR(CheckBatchSizes(request.batches(), "pull"));
  const bool fp16 = request.encoding() == v1::FLOAT16;
  if (!fp16 && request.encoding() != v1::FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown value encoding ", request.encoding()));
  }
  std::vector<size_t> value_counts;
  std::vector<size_t> value_bytes;
  uint64_t keys = 0, response_bytes = 0;
  STRATA_RETURN_IF_ERROR(CatchUpMapAfterPromotion());
  LookForNewerMap(request.shard_map_version());
  STRATA_RETURN_IF_ERROR(CheckRouting(request.shard_map_version(),
                                      request.batches(), *shard_map()));
  for (const v1::TableBatch& batch : request.batches()) {
    STRATA_ASSIGN_OR_RETURN(EmbeddingTableConfig config,
                            options_.store->GetTableConfig(batch.table()));
    value_counts.push_back(static_cast<size_t>(batch.keys_size()) * config.dim);
    value_bytes.push_back(value_counts.back() *
                          (fp16 ? sizeof(uint16_t) : sizeof(float)));
    keys += static_cast<uint64_t>(batch.keys_size());
    response_bytes += value_bytes.back();
    if (response_bytes > options_.max_response_bytes) {
      // Refused before anything is allocated for the answer.
      // INVALID_ARGUMENT, not RESOURCE_EXHAUSTED: the same request can never
      // succeed, so clients must not retry it.
      return absl::InvalidArgumentError(absl::StrCat(
          "pull answer would hold over ", response_bytes,
          " bytes of values (keys x dim x value size, at table '",
          batch.table(), "' of dimension ", config.dim, "), over the limit of ",
          options_.max_response_bytes, " bytes: pull fewer keys per request"));
    }
  }
  std::string refusal;
  if (request.has_shared_answer()) {
    STRATA_ASSIGN_OR_RETURN(
        std::optional<grpc::ByteBuffer> shared,
        TryPullIntoSharedMemory(request, value_counts, value_bytes, fp16,
                                refusal));
    if (shared.has_value()) {
      metrics_.AddKeysPulled(keys);
      return *std::move(shared);
    }
  }
  // The rows are looked up straight into the send buffer (aligned by the
  // writer), so each value is copied once on its way to the socket.
  PullResponseWriter writer(value_bytes, fp16);
  STRATA_RETURN_IF_ERROR(LookUpInto(request, value_counts, fp16, writer));
  metrics_.AddKeysPulled(keys);
  if (shared_refusal != nullptr) *shared_refusal = std::move(refusal);
  return writer.Finish();
}

absl::Status ShardService::LookUpInto(const v1::PullRequest& request,
                                      absl::Span<const size_t> value_counts,
                                      bool fp16, PullResponseWriter& writer) {
  std::vector<float> scratch;
  for (int b = 0; b < request.batches_size(); ++b) {
    const v1::TableBatch& batch = request.batches(b);
    const absl::Span<const FeatureId> ids(batch.keys().data(),
                                          batch.keys_size());
    const size_t count = value_counts[b];
    if (fp16) {
      scratch.resize(count);
      STRATA_RETURN_IF_ERROR(
          options_.store->Lookup(batch.table(), ids, absl::MakeSpan(scratch)));
      FloatsToHalves(scratch.data(), count,
                     reinterpret_cast<uint16_t*>(writer.batch_values(b)));
    } else {
      STRATA_RETURN_IF_ERROR(options_.store->Lookup(
          batch.table(), ids,
          absl::Span<float>(reinterpret_cast<float*>(writer.batch_values(b)),
                            count)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<grpc::ByteBuffer>>
ShardService::TryPullIntoSharedMemory(const v1::PullRequest& request,
                                      absl::Span<const size_t> value_counts,
                                      absl::Span<const size_t> value_bytes,
                                      bool fp16, std::string& refusal) {
  if (shared_answers_ == nullptr) {
    refusal = "this shard answers over gRPC only (--shared_memory_answers)";
    metrics_.AddSharedAnswerRefusal();
    return std::nullopt;
  }
  absl::StatusOr<server_internal::SharedAnswers::Region> region =
      shared_answers_->Find(request.shared_answer());
  if (!region.ok()) {
    refusal = std::string(region.status().message());
    metrics_.AddSharedAnswerRefusal();
    STRATA_LOG(INFO, "server")
        << "pull answers over gRPC, not in " << request.shared_answer().path()
        << ": " << refusal;
    return std::nullopt;
  }
  if (PullResponseWriter::MostBytes(value_bytes) >
      region->capacity - kSharedAnswerClaimBytes) {
    return std::nullopt;
  }
  // The client may have given the pull up: then the region may be another
  // pull's already (see SharedAnswerClaim), and this answer goes over gRPC
  // to no one.
  const uint64_t offered = request.shared_answer().claim();
  uint64_t expected = offered;
  if (SharedAnswerClaimState(offered) != SharedAnswerClaim::kOffered ||
      !ExchangeSharedAnswerClaim(
          region->data, &expected,
          SharedAnswerClaimAs(offered, SharedAnswerClaim::kWriting))) {
    return std::nullopt;
  }
  StoreSharedAnswerWriter(region->data, static_cast<uint64_t>(::getpid()));
  absl::Cleanup written = [&] {
    StoreSharedAnswerClaim(
        region->data,
        SharedAnswerClaimAs(offered, SharedAnswerClaim::kWritten));
  };
  PullResponseWriter writer(value_bytes, fp16,
                            region->data + kSharedAnswerClaimBytes);
  STRATA_RETURN_IF_ERROR(LookUpInto(request, value_counts, fp16, writer));
  metrics_.AddSharedAnswer();
  v1::PullResponse response;
  response.set_shared_answer_bytes(writer.length());
  grpc::Slice slice(response.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status ShardService::DoPush(const v1::PushRequest& request,
                                  v1::PushResponse& response) {
  STRATA_RETURN_IF_ERROR(CheckBatchSizes(request.batches(), "push"));
  PushId id{request.client_id(), request.sequence(), {}};
  STRATA_RETURN_IF_ERROR(CatchUpMapAfterPromotion());
  LookForNewerMap(request.shard_map_version());
  // From the routing check until the push is applied the map stays as it is
  // (InstallMapLocked waits for the gate).
  absl::ReaderMutexLock gate(&push_gate_);
  if (absl::Status routed = CheckRouting(request.shard_map_version(),
                                         request.batches(), *shard_map());
      !routed.ok()) {
    // A retry of a push this shard applied before the map changed (its
    // answer was lost) is still its own: answered as the duplicate it is
    // below, not refused, since the client would send its keys to their new
    // owners under a new sequence and they would be applied twice.
    if (!ShardMapVersionOf(routed) || !options_.store->WasPushApplied(id)) {
      return routed;
    }
  }
  // Buckets moving away: refused while their writes pause; otherwise their
  // keys are read again before the move ends (whatever the outcome here).
  STRATA_RETURN_IF_ERROR(moves_->CheckPush(request.batches()));
  auto apply = [&](const PushId& id) { return ApplyPush(request, id); };
  absl::StatusOr<bool> duplicate =
      options_.replica_group != nullptr
          ? options_.replica_group->ReplicatePush(request, apply)
          : apply(id);
  moves_->RecordPush(request.batches());
  STRATA_RETURN_IF_ERROR(duplicate.status());
  response.set_duplicate(*duplicate);
  return absl::OkStatus();
}

absl::StatusOr<bool> ShardService::ApplyPush(const v1::PushRequest& request,
                                             const PushId& id) {
  std::vector<std::vector<float>> decoded;
  uint64_t keys = 0;
  STRATA_ASSIGN_OR_RETURN(
      std::vector<GradientBatch> batches,
      server_internal::DecodePushBatches(request, decoded, keys));
  STRATA_ASSIGN_OR_RETURN(bool duplicate,
                          options_.store->ApplyGradients(batches, id));
  if (duplicate) {
    metrics_.AddDuplicatePush();
  } else {
    metrics_.AddKeysPushed(keys);
  }
  return duplicate;
}

grpc::ServerUnaryReactor* ShardService::MoveBuckets(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::MoveBucketsRequest, v1::MoveBucketsResponse>(
      context, ShardMethod::kMoveBuckets, request_bytes, response_bytes,
      [this](const v1::MoveBucketsRequest& request,
             v1::MoveBucketsResponse& response) -> absl::Status {
        return DoMoveBuckets(request, response);
      });
}

grpc::ServerUnaryReactor* ShardService::CreateTable(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::CreateTableRequest, v1::CreateTableResponse>(
      context, ShardMethod::kCreateTable, request_bytes, response_bytes,
      [this](const v1::CreateTableRequest& request,
             v1::CreateTableResponse& response) -> absl::Status {
        return DoCreateTable(request, response);
      });
}

grpc::ServerUnaryReactor* ShardService::ListTables(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::ListTablesRequest, v1::ListTablesResponse>(
      context, ShardMethod::kListTables, request_bytes, response_bytes,
      [this](const v1::ListTablesRequest&,
             v1::ListTablesResponse& response) -> absl::Status {
        for (const TableStats& stats : options_.store->ListTables()) {
          *response.add_tables() = TableInfoFromStats(stats);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ShardService::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return RunQueued(context, ShardMethod::kPull, [=]() -> absl::Status {
    server_internal::ReusedRequest<v1::PullRequest> parsed;
    STRATA_RETURN_IF_ERROR(ParseRequest(*request, "Pull", parsed.get()));
    std::string refusal;
    STRATA_ASSIGN_OR_RETURN(*response, DoPull(*parsed.get(), &refusal));
    if (!refusal.empty()) {
      context->AddTrailingMetadata(kSharedAnswerRefusalMetadata,
                                   PrintableAscii(refusal));
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ShardService::Push(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return RunQueued(context, ShardMethod::kPush, [=]() -> absl::Status {
    server_internal::ReusedRequest<v1::PushRequest> parsed;
    STRATA_RETURN_IF_ERROR(ParseRequest(*request, "Push", parsed.get()));
    v1::PushResponse answer;
    STRATA_RETURN_IF_ERROR(DoPush(*parsed.get(), answer));
    SerializeResponse(answer, response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ShardService::Checkpoint(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::CheckpointRequest, v1::CheckpointResponse>(
      context, ShardMethod::kCheckpoint, request_bytes, response_bytes,
      [this](const v1::CheckpointRequest& request,
             v1::CheckpointResponse& response) -> absl::Status {
        STRATA_ASSIGN_OR_RETURN(CheckpointInfo info,
                                CheckpointUnderMap(request));
        response.set_checkpoint_id(info.checkpoint_id);
        response.set_global_step(info.global_step);
        response.set_num_rows(info.num_rows);
        response.set_parent_id(info.parent_id);
        response.set_delta_rows(info.delta_rows);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ShardService::Restore(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::RestoreRequest, v1::RestoreResponse>(
      context, ShardMethod::kRestore, request_bytes, response_bytes,
      [this](const v1::RestoreRequest& request,
             v1::RestoreResponse& response) -> absl::Status {
        STRATA_RETURN_IF_ERROR(CheckRestorableMap(request.checkpoint_id()));
        auto restore = [&]() {
          return options_.store->Restore(request.checkpoint_id());
        };
        STRATA_ASSIGN_OR_RETURN(
            CheckpointInfo info,
            options_.replica_group != nullptr
                ? options_.replica_group->ReplicateRestore(restore)
                : restore());
        response.set_global_step(info.global_step);
        response.set_num_rows(info.num_rows);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ShardService::GetShardMap(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::GetShardMapRequest, v1::ShardMap>(
      context, ShardMethod::kGetShardMap, request_bytes, response_bytes,
      [this](const v1::GetShardMapRequest&,
             v1::ShardMap& response) -> absl::Status {
        STRATA_RETURN_IF_ERROR(CatchUpMapAfterPromotion());
        response = ShardMapToProto(*shard_map());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ShardService::SetShardMap(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::SetShardMapRequest, v1::SetShardMapResponse>(
      context, ShardMethod::kSetShardMap, request_bytes, response_bytes,
      [this](const v1::SetShardMapRequest& request,
             v1::SetShardMapResponse& response) -> absl::Status {
        return DoSetShardMap(request, response);
      });
}

grpc::ServerUnaryReactor* ShardService::Stats(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return RunTyped<v1::StatsRequest, v1::StatsResponse>(
      context, ShardMethod::kStats, request_bytes, response_bytes,
      [this](const v1::StatsRequest&,
             v1::StatsResponse& response) -> absl::Status {
        if (options_.replica_group != nullptr) {
          FillReplicaGroupInfo(options_.replica_group->GetStatus(),
                               response.mutable_replication());
        }
        response.set_shard_index(options_.shard_index);
        response.set_num_shards(shard_map()->num_shards());
        response.set_shard_map_version(shard_map()->version());
        response.set_durability(
            std::string(DurabilityName(options_.store->durability())));
        response.set_uptime_seconds(
            absl::ToDoubleSeconds(options_.clock->Now() - start_time_));
        response.set_pull_requests(metrics_.requests(ShardMethod::kPull));
        response.set_push_requests(metrics_.requests(ShardMethod::kPush));
        response.set_keys_pulled(metrics_.keys_pulled());
        response.set_keys_pushed(metrics_.keys_pushed());
        response.set_duplicate_pushes(metrics_.duplicate_pushes());
        response.set_failed_requests(metrics_.failed_requests());
        const StorageStats storage = options_.store->GetStorageStats();
        response.set_failed_writes(storage.failed_writes);
        response.set_unwritten_rows(storage.unwritten_rows);
        response.set_write_error(storage.write_error);
        for (const TableStats& stats : options_.store->ListTables()) {
          *response.add_tables() = TableInfoFromStats(stats);
        }
        for (const std::string& id : options_.store->ListCheckpoints()) {
          response.add_checkpoints(id);
        }
        return absl::OkStatus();
      });
}

grpc::ServerWriteReactor<v1::ChangeBatch>* ShardService::Subscribe(
    grpc::CallbackServerContext* context, const v1::SubscribeRequest* request) {
  const absl::Status authorized = Authorize(context, ShardMethod::kSubscribe);
  metrics_.Record(ShardMethod::kSubscribe, authorized.code(),
                  absl::ZeroDuration());
  if (!authorized.ok()) return new RefusedStream(ToGrpcStatus(authorized));
  if (subscribers_->fetch_add(1) >= options_.max_subscribers) {
    subscribers_->fetch_sub(1);
    return new RefusedStream(ToGrpcStatus(absl::ResourceExhaustedError(
        absl::StrCat("this shard already serves ", options_.max_subscribers,
                     " change streams (--max_subscribers); retry later"))));
  }
  server_internal::SubscriptionOptions options;
  options.store = options_.store;
  options.shard_index = options_.shard_index;
  options.num_shards = options_.num_shards;
  options.stall_timeout = options_.subscriber_stall_timeout;
  options.open_streams = subscribers_;
  options.shard_map = [this] { return shard_map(); };
  if (ReplicaGroup* group = options_.replica_group; group != nullptr) {
    options.describe_replica_group = [group](v1::ReplicaGroupInfo* info) {
      FillReplicaGroupInfo(group->GetStatus(), info);
    };
  }
  return new server_internal::Subscription(options, context, *request);
}

}  // namespace strata
