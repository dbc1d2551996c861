#include "serving/shard_follower.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/auth.h"
#include "common/fp16.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/primary_redirect.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.grpc.pb.h"
#include "server/table_config_proto.h"

namespace strata {
namespace {

constexpr char kComponent[] = "follower";

absl::Status ProtocolError(uint32_t shard, const std::string& what) {
  return absl::DataLossError(
      absl::StrCat("shard ", shard, " broke the stream protocol: ", what));
}

// The shard sends only the tables asked for; `followed` (empty: all) checks
// it again, so that a table not followed is never served.
absl::Status AddTables(const v1::ChangeBatch& batch,
                       const absl::flat_hash_set<std::string>& followed,
                       ShardUpdate& update) {
  for (const v1::TableConfig& proto : batch.table_configs()) {
    if (!followed.empty() && !followed.contains(proto.name())) continue;
    STRATA_ASSIGN_OR_RETURN(EmbeddingTableConfig config,
                            TableConfigFromProto(proto));
    update.tables.push_back(std::move(config));
  }
  return absl::OkStatus();
}

// Adds the batch's rows and deleted keys to `update`; fp16 values are
// widened into `storage`, which must outlive the update.
absl::Status AddRows(const v1::ChangeBatch& batch,
                     const absl::flat_hash_set<std::string>& followed,
                     ShardUpdate& update,
                     std::vector<std::vector<float>>& storage) {
  for (const v1::TableBatch& rows : batch.rows()) {
    if (!followed.empty() && !followed.contains(rows.table())) continue;
    absl::Span<const float> values(rows.values().data(), rows.values_size());
    const std::string& halves = rows.values_fp16();
    if (values.empty() && !halves.empty()) {
      if (halves.size() % 2 != 0) {
        return absl::DataLossError("fp16 values of odd byte length");
      }
      std::vector<uint16_t> aligned(halves.size() / 2);
      std::memcpy(aligned.data(), halves.data(), halves.size());
      storage.emplace_back(aligned.size());
      HalvesToFloats(aligned.data(), aligned.size(), storage.back().data());
      values = storage.back();
    }
    update.rows.push_back(
        {rows.table(),
         absl::MakeConstSpan(rows.keys().data(), rows.keys_size()), values});
  }
  for (const v1::TableBatch& rows : batch.deleted()) {
    if (!followed.empty() && !followed.contains(rows.table())) continue;
    update.deleted.push_back(
        {rows.table(),
         absl::MakeConstSpan(rows.keys().data(), rows.keys_size())});
  }
  return absl::OkStatus();
}

}  // namespace

ShardFollower::ShardFollower(const ShardFollowerOptions& options)
    : options_(options),
      followed_(options.tables.begin(), options.tables.end()) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // Find a restarted shard within our own backoff, not gRPC's (up to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.max_backoff)));
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A replicated shard's address lists its replicas, joined by '|': the
  // stream goes to the primary, found through the replicas' redirects.
  for (absl::string_view replica : absl::StrSplit(options.address, '|')) {
    replica_addresses_.emplace_back(replica);
    channels_.push_back(grpc::CreateCustomChannel(
        std::string(replica),
        options.credentials ? options.credentials
                            : grpc::InsecureChannelCredentials(),
        args));
  }
  const ShardPosition position = options_.store->Position(options.shard_index);
  absl::MutexLock lock(&mu_);
  state_.shard_index = options.shard_index;
  state_.address = options.address;
  state_.incarnation = position.incarnation;
  state_.applied_sequence = position.sequence;
  acknowledged_micros_ = position.acknowledged_micros;
}

ShardFollower::~ShardFollower() { Stop(); }

void ShardFollower::Start() {
  {
    absl::MutexLock lock(&mu_);
    started_at_ = options_.clock->Now();
  }
  runner_ = std::thread([this] { Run(); });
  watchdog_ = std::thread([this] { Watch(); });
}

void ShardFollower::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  if (runner_.joinable()) runner_.join();
  if (watchdog_.joinable()) watchdog_.join();
}

FollowState ShardFollower::state() const {
  absl::MutexLock lock(&mu_);
  FollowState state = state_;
  state.last_heard = last_heard_;
  if (state.connected && !snapshotting_ &&
      state.applied_sequence >= state.latest_sequence) {
    state.lag_seconds = 0;
    return state;
  }
  absl::Time fresh_as_of = caught_up_at_;
  if (acknowledged_micros_ > 0) {
    fresh_as_of =
        std::max(fresh_as_of, absl::FromUnixMicros(acknowledged_micros_));
  }
  if (fresh_as_of == absl::InfinitePast()) fresh_as_of = started_at_;
  state.lag_seconds =
      std::max(0.0, absl::ToDoubleSeconds(options_.clock->Now() - fresh_as_of));
  return state;
}

void ShardFollower::SetDisconnected(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  state_.connected = false;
  state_.streaming_from.clear();
  snapshotting_ = false;
  if (!why.ok()) state_.last_error = why.ToString();
}

void ShardFollower::Run() {
  absl::Duration backoff = options_.initial_backoff;
  std::string last_logged;
  while (!stop_.HasBeenNotified()) {
    const absl::Status ended = FollowOnce();
    if (stop_.HasBeenNotified()) break;
    SetDisconnected(ended);
    ChooseReplica(ended);
    if (ended.ok()) {  // The stream's deadline: go on on a new one.
      backoff = options_.initial_backoff;
      continue;
    }
    if (stream_started_) backoff = options_.initial_backoff;
    // One line per new problem, not one per retry of a long outage.
    const std::string text = ended.ToString();
    if (text != last_logged) {
      STRATA_LOG(WARNING, kComponent)
          << "shard " << options_.shard_index << " (" << options_.address
          << "): " << text << "; retrying with backoff up to "
          << absl::FormatDuration(options_.max_backoff);
      last_logged = text;
    }
    if (stream_started_) last_logged.clear();
    stop_.WaitForNotificationWithTimeout(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  SetDisconnected(absl::OkStatus());
}

void ShardFollower::ChooseReplica(const absl::Status& ended) {
  if (channels_.size() < 2 || ended.ok()) return;
  if (std::optional<std::string> primary = RedirectedPrimary(ended)) {
    for (size_t i = 0; i < replica_addresses_.size(); ++i) {
      if (replica_addresses_[i] == *primary) SwitchTo(i);
    }
    return;
  }
  // Not reachable, or no primary yet: try the next replica.
  SwitchTo((replica_ + 1) % channels_.size());
}

void ShardFollower::SwitchTo(size_t replica) {
  if (replica == replica_) return;
  replica_ = replica;
  absl::MutexLock lock(&mu_);
  ++state_.replica_switches;
}

void ShardFollower::Watch() {
  const absl::Duration period =
      std::min(options_.idle_timeout / 4, absl::Seconds(1));
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    absl::MutexLock lock(&mu_);
    if (context_ == nullptr) continue;
    const absl::Time heard = std::max(last_heard_, stream_opened_at_);
    if (options_.clock->Now() - heard > options_.idle_timeout) {
      context_->TryCancel();
      silenced_ = true;
    }
  }
}

absl::Status ShardFollower::FollowOnce() {
  const ShardPosition position =
      force_snapshot_ ? ShardPosition()
                      : options_.store->Position(options_.shard_index);
  v1::SubscribeRequest request;
  request.set_incarnation(position.incarnation);
  request.set_from_sequence(position.sequence);
  for (const std::string& table : options_.tables) request.add_tables(table);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(options_.stream_deadline));
  AddBearerToken(options_.auth_token, context);
  {
    absl::MutexLock lock(&mu_);
    if (stop_.HasBeenNotified()) return absl::CancelledError("stopping");
    context_ = &context;
    stream_opened_at_ = options_.clock->Now();
    silenced_ = false;
  }
  in_snapshot_ = false;
  stream_started_ = false;
  auto stub = v1::ParameterServer::NewStub(channels_[replica_]);
  std::unique_ptr<grpc::ClientReader<v1::ChangeBatch>> reader =
      stub->Subscribe(&context, request);
  v1::ChangeBatch batch;
  absl::Status handled;
  while (handled.ok() && reader->Read(&batch)) {
    handled = Handle(batch);
    if (!handled.ok()) context.TryCancel();
  }
  const grpc::Status finished = reader->Finish();
  bool silenced = false;
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    silenced = silenced_;
  }
  if (in_snapshot_) {
    options_.store->CancelSnapshot(options_.shard_index);
    STRATA_LOG(WARNING, kComponent)
        << "shard " << options_.shard_index
        << ": snapshot interrupted; the next stream starts over";
  }
  if (!handled.ok()) return handled;
  if (silenced) {
    return absl::DeadlineExceededError(
        absl::StrCat("shard ", options_.address, " sent nothing for ",
                     absl::FormatDuration(options_.idle_timeout)));
  }
  if (finished.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      stream_started_) {
    return absl::OkStatus();
  }
  // Our position is past the shard's: it lost updates; start over.
  if (finished.error_code() == grpc::StatusCode::OUT_OF_RANGE) {
    force_snapshot_ = true;
  }
  if (finished.ok()) {
    return absl::UnavailableError(
        absl::StrCat("shard ", options_.address, " ended the stream"));
  }
  return absl::Status(
      static_cast<absl::StatusCode>(finished.error_code()),
      absl::StrCat("shard ", options_.address, ": ", finished.error_message()));
}

absl::Status ShardFollower::CheckIdentity(const v1::ChangeBatch& batch) {
  // Only the index: the shard count changes when the cluster grows or
  // shrinks, and a shard started before that reports the count it started
  // with.
  if (batch.shard_index() != options_.shard_index) {
    return absl::FailedPreconditionError(absl::StrCat(
        options_.address, " is shard ", batch.shard_index(), " of ",
        batch.num_shards(), ", but is listed as shard ", options_.shard_index,
        " of ", options_.num_shards, " (check the order of --shards)"));
  }
  return absl::OkStatus();
}

absl::Status ShardFollower::Handle(const v1::ChangeBatch& batch) {
  STRATA_RETURN_IF_ERROR(CheckIdentity(batch));
  const uint32_t shard = options_.shard_index;
  if (!stream_started_ && batch.kind() != v1::ChangeBatch::SNAPSHOT_BEGIN) {
    STRATA_LOG(INFO, kComponent)
        << "shard " << shard << ": resumed after sequence "
        << options_.store->Position(shard).sequence << " of incarnation "
        << batch.incarnation();
    absl::MutexLock lock(&mu_);
    ++state_.resumes;
  }
  stream_started_ = true;
  switch (batch.kind()) {
    case v1::ChangeBatch::SNAPSHOT_BEGIN: {
      if (in_snapshot_) return ProtocolError(shard, "nested snapshot");
      ShardUpdate update;
      update.shard_index = shard;
      STRATA_RETURN_IF_ERROR(AddTables(batch, followed_, update));
      STRATA_RETURN_IF_ERROR(options_.store->BeginSnapshot(shard));
      in_snapshot_ = true;  // From here a broken stream cancels it.
      STRATA_RETURN_IF_ERROR(options_.store->Apply(update));
      snapshot_incarnation_ = batch.incarnation();
      snapshot_sequence_ = batch.sequence();
      STRATA_LOG(INFO, kComponent)
          << "shard " << shard << ": snapshot at sequence " << batch.sequence()
          << " of incarnation " << batch.incarnation();
      absl::MutexLock lock(&mu_);
      ++state_.snapshots;
      snapshotting_ = true;
      break;
    }
    case v1::ChangeBatch::SNAPSHOT_ROWS: {
      if (!in_snapshot_ || batch.incarnation() != snapshot_incarnation_) {
        return ProtocolError(shard, "snapshot rows outside a snapshot");
      }
      ShardUpdate update;
      update.shard_index = shard;
      std::vector<std::vector<float>> storage;
      STRATA_RETURN_IF_ERROR(AddRows(batch, followed_, update, storage));
      STRATA_RETURN_IF_ERROR(options_.store->Apply(update));
      break;
    }
    case v1::ChangeBatch::SNAPSHOT_END:
      STRATA_RETURN_IF_ERROR(EndSnapshot(batch));
      break;
    case v1::ChangeBatch::DELTA:
    case v1::ChangeBatch::TABLE_CREATED:
      STRATA_RETURN_IF_ERROR(HandleUpdate(batch));
      break;
    case v1::ChangeBatch::HEARTBEAT:
      if (batch.incarnation() !=
          (in_snapshot_ ? snapshot_incarnation_
                        : options_.store->Position(shard).incarnation)) {
        return ProtocolError(shard, "heartbeat of another incarnation");
      }
      break;
    default:
      // A kind added after this release: nothing to apply.
      break;
  }
  const absl::Time now = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  state_.connected = true;
  // Once per stream: SetDisconnected clears it when the stream ends.
  if (channels_.size() > 1 && state_.streaming_from.empty()) {
    state_.streaming_from = replica_addresses_[replica_];
  }
  if (batch.has_replica_group()) {
    state_.replica_group =
        std::make_shared<const v1::ReplicaGroupInfo>(batch.replica_group());
  }
  state_.latest_sequence = batch.latest_sequence();
  last_heard_ = now;
  if (!in_snapshot_ && state_.applied_sequence >= state_.latest_sequence) {
    caught_up_at_ = now;
  }
  return absl::OkStatus();
}

absl::Status ShardFollower::EndSnapshot(const v1::ChangeBatch& batch) {
  const uint32_t shard = options_.shard_index;
  if (!in_snapshot_ || batch.incarnation() != snapshot_incarnation_ ||
      batch.sequence() != snapshot_sequence_) {
    return ProtocolError(shard, "snapshot end does not match its beginning");
  }
  // The snapshot holds the shard's state as of about now.
  const int64_t acknowledged = batch.acknowledged_micros() > 0
                                   ? batch.acknowledged_micros()
                                   : absl::ToUnixMicros(options_.clock->Now());
  const ShardPosition position{batch.incarnation(), batch.sequence(),
                               acknowledged};
  STRATA_RETURN_IF_ERROR(options_.store->EndSnapshot(shard, position));
  in_snapshot_ = false;
  force_snapshot_ = false;
  STRATA_LOG(INFO, kComponent)
      << "shard " << shard << ": snapshot complete at sequence "
      << batch.sequence();
  absl::MutexLock lock(&mu_);
  snapshotting_ = false;
  state_.incarnation = position.incarnation;
  state_.applied_sequence = position.sequence;
  acknowledged_micros_ = acknowledged;
  return absl::OkStatus();
}

absl::Status ShardFollower::HandleUpdate(const v1::ChangeBatch& batch) {
  const uint32_t shard = options_.shard_index;
  if (in_snapshot_) return ProtocolError(shard, "update inside a snapshot");
  const ShardPosition position = options_.store->Position(shard);
  if (batch.incarnation() != position.incarnation) {
    return ProtocolError(
        shard, absl::StrCat("update of incarnation ", batch.incarnation(),
                            " while following ", position.incarnation));
  }
  // Already applied (overwriting again would be harmless, but we don't).
  if (batch.sequence() <= position.sequence) return absl::OkStatus();
  if (batch.sequence() != position.sequence + 1) {
    return ProtocolError(shard, absl::StrCat("update ", batch.sequence(),
                                             " follows ", position.sequence));
  }
  ShardUpdate update;
  update.shard_index = shard;
  std::vector<std::vector<float>> storage;
  STRATA_RETURN_IF_ERROR(AddTables(batch, followed_, update));
  STRATA_RETURN_IF_ERROR(AddRows(batch, followed_, update, storage));
  update.position = ShardPosition{batch.incarnation(), batch.sequence(),
                                  batch.acknowledged_micros()};
  if (absl::Status applied = options_.store->Apply(update); !applied.ok()) {
    // The store refused what the shard sent: start over from a snapshot.
    force_snapshot_ = true;
    return applied;
  }
  const absl::Time visible = options_.clock->Now();
  absl::MutexLock lock(&mu_);
  state_.applied_sequence = batch.sequence();
  ++state_.updates;
  if (batch.acknowledged_micros() > 0) {
    acknowledged_micros_ = batch.acknowledged_micros();
    const double seconds = std::max(
        0.0, absl::ToDoubleSeconds(
                 visible - absl::FromUnixMicros(batch.acknowledged_micros())));
    const auto& bounds = FollowState::kFreshnessBounds;
    ++state_.freshness_buckets[std::lower_bound(bounds.begin(), bounds.end(),
                                                seconds) -
                               bounds.begin()];
    state_.freshness_sum_seconds += seconds;
  }
  return absl::OkStatus();
}

}  // namespace strata
