#include "server/internal/subscription.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "common/hash.h"
#include "common/logging.h"
#include "server/table_config_proto.h"

namespace strata {
namespace server_internal {
namespace {

void AddRows(const ChangedRows& rows, v1::ChangeBatch& batch) {
  v1::TableBatch* out = batch.add_rows();
  out->set_table(rows.table);
  out->mutable_keys()->Add(rows.keys.begin(), rows.keys.end());
  out->mutable_values()->Add(rows.values.begin(), rows.values.end());
}

// The rows of `rows` that `map` gives to shard `shard`.
void AddOwnedRows(const ChangedRows& rows, const ShardMap& map, uint32_t shard,
                  v1::ChangeBatch& batch) {
  v1::TableBatch* out = batch.add_rows();
  out->set_table(rows.table);
  const uint64_t table_hash = HashString(rows.table);
  for (size_t i = 0; i < rows.keys.size(); ++i) {
    if (map.OwnerOfKey(table_hash, rows.keys[i]) != shard) continue;
    out->add_keys(rows.keys[i]);
    const float* row = rows.values.data() + i * rows.dim;
    out->mutable_values()->Add(row, row + rows.dim);
  }
  if (out->keys().empty()) batch.mutable_rows()->RemoveLast();
}

}  // namespace

Subscription::Subscription(const SubscriptionOptions& options,
                           grpc::CallbackServerContext* context,
                           const v1::SubscribeRequest& request)
    : options_(options), context_(context), request_(request) {
  producer_ = std::thread([this] { Produce(); });
}

void Subscription::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) write_failed_ = true;
}

void Subscription::OnCancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

void Subscription::OnDone() {
  // The producer called Finish as its last act, so it is about to return.
  if (producer_.get_id() == std::this_thread::get_id()) {
    producer_.detach();
  } else {
    producer_.join();
  }
  if (options_.open_streams != nullptr) options_.open_streams->fetch_sub(1);
  delete this;
}

bool Subscription::cancelled() {
  absl::MutexLock lock(&mu_);
  return cancelled_ || write_failed_;
}

bool Subscription::Send(v1::ChangeBatch batch) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !writing_ || cancelled_ || write_failed_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), options_.stall_timeout)) {
    // The follower has not taken the last batch: cut it off, which fails
    // the write in flight, and release what this stream holds.
    STRATA_LOG(WARNING, "subscribe")
        << "a follower took no batch for " << options_.stall_timeout
        << ": ending its stream";
    context_->TryCancel();
    return false;
  }
  if (cancelled_ || write_failed_) return false;
  in_flight_ = std::move(batch);
  writing_ = true;
  StartWrite(&in_flight_);
  return true;
}

v1::ChangeBatch Subscription::NewBatch(v1::ChangeBatch::Kind kind,
                                       uint64_t sequence) {
  v1::ChangeBatch batch;
  batch.set_kind(kind);
  batch.set_incarnation(incarnation_);
  batch.set_sequence(sequence);
  batch.set_latest_sequence(options_.store->change_log().latest_sequence());
  batch.set_shard_index(options_.shard_index);
  batch.set_num_shards(options_.num_shards);
  if (options_.describe_replica_group) {
    const absl::Time now = Clock::Real()->Now();
    if (now >= next_group_info_) {
      options_.describe_replica_group(batch.mutable_replica_group());
      next_group_info_ = now + options_.heartbeat_interval;
    }
  }
  return batch;
}

absl::Status Subscription::SendSnapshot(uint64_t* sequence) {
  const std::vector<std::string> tables(request_.tables().begin(),
                                        request_.tables().end());
  // Read a chunk at a time: a follower that reads slowly costs one chunk
  // here, not a copy of the tables.
  absl::StatusOr<std::unique_ptr<ValueSnapshotReader>> opened =
      options_.store->OpenValueSnapshot(tables);
  if (!opened.ok()) return opened.status();
  ValueSnapshotReader& snapshot = **opened;
  incarnation_ = snapshot.incarnation();
  v1::ChangeBatch begin =
      NewBatch(v1::ChangeBatch::SNAPSHOT_BEGIN, snapshot.sequence());
  for (const EmbeddingTableConfig& config : snapshot.tables()) {
    *begin.add_table_configs() = TableConfigToProto(config);
  }
  if (!Send(std::move(begin))) return absl::CancelledError("stream closed");
  const std::shared_ptr<const ShardMap> map =
      options_.shard_map ? options_.shard_map() : nullptr;
  ChangedRows chunk;
  while (true) {
    absl::StatusOr<bool> more = snapshot.Next(chunk);
    if (!more.ok()) return more.status();
    if (!*more) break;
    v1::ChangeBatch rows =
        NewBatch(v1::ChangeBatch::SNAPSHOT_ROWS, snapshot.sequence());
    if (map != nullptr) {
      AddOwnedRows(chunk, *map, options_.shard_index, rows);
    } else {
      AddRows(chunk, rows);
    }
    if (!Send(std::move(rows))) return absl::CancelledError("stream closed");
  }
  if (!Send(NewBatch(v1::ChangeBatch::SNAPSHOT_END, snapshot.sequence()))) {
    return absl::CancelledError("stream closed");
  }
  *sequence = snapshot.sequence();
  STRATA_LOG(INFO, "subscribe")
      << "sent a snapshot of " << snapshot.tables().size() << " tables at "
      << "sequence " << snapshot.sequence();
  return absl::OkStatus();
}

absl::Status Subscription::SendDeltas(uint64_t* sequence) {
  const ChangeLog& log = options_.store->change_log();
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  absl::Status read =
      log.ReadAfter(*sequence, options_.max_records_per_read, &records);
  if (!read.ok()) return read;
  for (const auto& record : records) {
    if (record->created_table != nullptr) {
      v1::ChangeBatch created =
          NewBatch(v1::ChangeBatch::TABLE_CREATED, record->sequence);
      *created.add_table_configs() = TableConfigToProto(*record->created_table);
      if (!Send(std::move(created))) return absl::CancelledError("closed");
    } else {
      v1::ChangeBatch delta =
          NewBatch(v1::ChangeBatch::DELTA, record->sequence);
      delta.set_acknowledged_micros(absl::ToUnixMicros(record->acknowledged));
      for (const ChangedRows& rows : record->rows) {
        if (Follows(rows.table)) AddRows(rows, delta);
      }
      for (const DeletedRows& rows : record->deleted) {
        if (!Follows(rows.table)) continue;
        v1::TableBatch* out = delta.add_deleted();
        out->set_table(rows.table);
        out->mutable_keys()->Add(rows.keys.begin(), rows.keys.end());
      }
      // An update of tables this follower does not follow still advances
      // its sequence, so it is sent without rows.
      if (!Send(std::move(delta))) return absl::CancelledError("closed");
    }
    *sequence = record->sequence;
  }
  return absl::OkStatus();
}

bool Subscription::Follows(const std::string& table) const {
  return request_.tables().empty() ||
         std::find(request_.tables().begin(), request_.tables().end(), table) !=
             request_.tables().end();
}

bool Subscription::WaitForChangeOrCancel(uint64_t sequence) {
  // In short slices, so that a cancelled stream (a follower gone, a server
  // shutting down) is noticed quickly.
  const ChangeLog& log = options_.store->change_log();
  const absl::Time heartbeat =
      Clock::Real()->Now() + options_.heartbeat_interval;
  while (!cancelled()) {
    const absl::Time slice = Clock::Real()->Now() + absl::Milliseconds(50);
    if (log.WaitForChange(sequence, std::min(slice, heartbeat))) return true;
    if (Clock::Real()->Now() >= heartbeat) return false;
  }
  return true;  // The caller sees the cancellation.
}

void Subscription::Produce() {
  const ChangeLog& log = options_.store->change_log();
  uint64_t sequence = 0;
  absl::Status status;
  // Before the snapshot is taken: every record after it carries its rows.
  log.NoteReader();
  incarnation_ = log.incarnation();
  const bool resume =
      request_.incarnation() == incarnation_ && request_.incarnation() != 0;
  if (resume && request_.from_sequence() > log.latest_sequence()) {
    status = absl::OutOfRangeError(
        absl::StrCat("from_sequence ", request_.from_sequence(),
                     " is past this shard's latest sequence ",
                     log.latest_sequence(), " of incarnation ", incarnation_));
  } else if (resume) {
    sequence = request_.from_sequence();
    // Tells the follower at once that it is connected and how far behind.
    if (!Send(NewBatch(v1::ChangeBatch::HEARTBEAT, sequence))) {
      status = absl::CancelledError("stream closed");
    }
  } else {
    status = SendSnapshot(&sequence);
  }
  while (status.ok() && !cancelled()) {
    if (log.incarnation() != incarnation_) {
      // The shard restored a checkpoint: start over.
      status = SendSnapshot(&sequence);
      continue;
    }
    status = SendDeltas(&sequence);
    if (absl::IsOutOfRange(status)) {
      // Fell behind what the log keeps: a snapshot replaces the gap.
      status = SendSnapshot(&sequence);
      continue;
    }
    if (!status.ok()) break;
    if (!WaitForChangeOrCancel(sequence) &&
        !Send(NewBatch(v1::ChangeBatch::HEARTBEAT, sequence))) {
      break;
    }
  }
  if (absl::IsCancelled(status)) status = absl::OkStatus();
  {
    // Let a write in flight finish before finishing the call.
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !writing_; };
    mu_.Await(absl::Condition(&idle));
  }
  Finish(cancelled() && status.ok() ? grpc::Status::CANCELLED
                                    : ToGrpcStatus(status));
}

}  // namespace server_internal
}  // namespace strata
