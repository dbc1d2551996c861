// ShardService, the steps of a bucket move (MoveBuckets): the source tracks
// and exports the rows of the buckets, pauses their writes for the last
// catch-up; the target imports them; both drop rows of buckets they do not
// own. `stratactl move-buckets` drives the steps; docs/ARCHITECTURE.md,
// "Moving buckets", tells why they are safe.

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/internal/bucket_move_source.h"
#include "server/internal/moved_rows.h"
#include "server/replication/replica_group.h"
#include "server/shard_service.h"

namespace strata {
namespace {

using server_internal::BucketSet;

constexpr uint32_t kDefaultMoveRows = 4096;
constexpr uint32_t kMaxMoveRows = 65536;
constexpr size_t kMaxMoveIdBytes = 128;

absl::StatusOr<BucketSet> ParseBuckets(
    const google::protobuf::RepeatedField<uint32_t>& buckets) {
  if (buckets.empty()) {
    return absl::InvalidArgumentError("MoveBuckets: no bucket named");
  }
  BucketSet set;
  for (uint32_t bucket : buckets) {
    if (bucket >= kNumBuckets) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MoveBuckets: bucket ", bucket, " is out of range (buckets are 0 to ",
          kNumBuckets - 1, ")"));
    }
    set[bucket] = true;
  }
  return set;
}

absl::StatusOr<size_t> MaxMoveRows(uint32_t requested) {
  if (requested == 0) return kDefaultMoveRows;
  if (requested > kMaxMoveRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoveBuckets: max_rows ", requested, " is over ", kMaxMoveRows));
  }
  return requested;
}

absl::Status CheckMoveId(const std::string& move_id) {
  if (move_id.empty() || move_id.size() > kMaxMoveIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoveBuckets: move_id must have 1 to ", kMaxMoveIdBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ShardService::DoMoveBuckets(const v1::MoveBucketsRequest& request,
                                         v1::MoveBucketsResponse& response) {
  switch (request.step()) {
    case v1::MoveBucketsRequest::BEGIN:
      return BeginMove(request, response);
    case v1::MoveBucketsRequest::COPY:
      return CopyMovingRows(request, response);
    case v1::MoveBucketsRequest::CATCH_UP:
      return CatchUpMovingRows(request, response);
    case v1::MoveBucketsRequest::IMPORT:
      return ImportMovedRows(request);
    case v1::MoveBucketsRequest::DROP:
      return DropMovedRows(request, response);
    case v1::MoveBucketsRequest::END:
      response.set_paused_seconds(
          absl::ToDoubleSeconds(moves_->End(request.move_id())));
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("MoveBuckets: unknown step ", request.step()));
  }
}

absl::Status ShardService::BeginMove(const v1::MoveBucketsRequest& request,
                                     v1::MoveBucketsResponse& response) {
  STRATA_RETURN_IF_ERROR(CheckMoveId(request.move_id()));
  STRATA_ASSIGN_OR_RETURN(BucketSet buckets, ParseBuckets(request.buckets()));
  {
    absl::MutexLock set_lock(&set_map_mu_);
    const std::shared_ptr<const ShardMap> map = shard_map();
    if (request.target_shard() >= map->num_shards() ||
        request.target_shard() == options_.shard_index) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MoveBuckets: target shard ", request.target_shard(),
          " is not another shard of this cluster of ", map->num_shards()));
    }
    for (uint32_t bucket : request.buckets()) {
      if (map->OwnerOf(bucket) != options_.shard_index) {
        return absl::FailedPreconditionError(absl::StrCat(
            "MoveBuckets: bucket ", bucket, " is owned by shard ",
            map->OwnerOf(bucket), " under shard map version ", map->version(),
            ", not by this shard ", options_.shard_index));
      }
    }
    // No push is between its routing check and its apply: every push from
    // here on is tracked, every one before is in what COPY reads.
    absl::WriterMutexLock gate(&push_gate_);
    moves_->Begin(request.move_id(), buckets, request.target_shard());
  }
  for (const TableStats& table : options_.store->ListTables()) {
    response.add_tables(table.config.name);
  }
  return absl::OkStatus();
}

absl::Status ShardService::CopyMovingRows(const v1::MoveBucketsRequest& request,
                                          v1::MoveBucketsResponse& response) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const BucketSet> buckets,
                          moves_->BucketsOf(request.move_id()));
  STRATA_ASSIGN_OR_RETURN(size_t max_rows, MaxMoveRows(request.max_rows()));
  const uint64_t table_hash = HashString(request.table());
  ExportCursor cursor;
  cursor.stripe = request.cursor().stripe();
  cursor.offset = request.cursor().offset();
  cursor.disk_key = request.cursor().disk_key();
  cursor.done = request.cursor().done();
  STRATA_ASSIGN_OR_RETURN(
      RowBlock block,
      options_.store->ExportRows(
          request.table(),
          [&](FeatureId key) { return (*buckets)[BucketOf(table_hash, key)]; },
          cursor, max_rows));
  server_internal::MovedRowsToProto(block, response.add_rows());
  v1::RowCursor* next = response.mutable_cursor();
  next->set_stripe(cursor.stripe);
  next->set_offset(cursor.offset);
  next->set_disk_key(cursor.disk_key);
  next->set_done(cursor.done);
  return absl::OkStatus();
}

absl::Status ShardService::CatchUpMovingRows(
    const v1::MoveBucketsRequest& request, v1::MoveBucketsResponse& response) {
  STRATA_RETURN_IF_ERROR(moves_->BucketsOf(request.move_id()).status());
  STRATA_ASSIGN_OR_RETURN(size_t max_rows, MaxMoveRows(request.max_rows()));
  if (request.pause_writes()) {
    // Once no push is between its check and its apply, none of the
    // buckets' is let through: what TakePending gives is the last.
    absl::WriterMutexLock gate(&push_gate_);
    STRATA_RETURN_IF_ERROR(moves_->Pause(request.move_id()));
  }
  uint64_t left = 0;
  std::vector<server_internal::PendingKeys> pending =
      moves_->TakePending(max_rows, &left);
  for (size_t i = 0; i < pending.size(); ++i) {
    absl::StatusOr<RowBlock> block =
        options_.store->ReadRows(pending[i].table, pending[i].keys);
    if (!block.ok()) {
      for (size_t j = i; j < pending.size(); ++j) moves_->Requeue(pending[j]);
      return block.status();
    }
    server_internal::MovedRowsToProto(*block, response.add_rows());
  }
  response.set_pending_keys(left);
  return absl::OkStatus();
}

absl::Status ShardService::CheckNotOwned(
    const std::vector<uint32_t>& buckets) const {
  const std::shared_ptr<const ShardMap> map = shard_map();
  for (uint32_t bucket : buckets) {
    if (map->OwnerOf(bucket) == options_.shard_index) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MoveBuckets: bucket ", bucket, " is owned by this shard ",
          options_.shard_index, " under shard map version ", map->version(),
          ": its rows are live here"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShardService::ImportMovedRows(
    const v1::MoveBucketsRequest& request) {
  uint64_t keys = 0;
  for (const v1::BucketRows& rows : request.rows()) {
    keys += static_cast<uint64_t>(rows.keys_size() + rows.absent_keys_size());
  }
  if (keys > options_.max_keys_per_request) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoveBuckets: the import holds ", keys, " keys, over the maximum of ",
        options_.max_keys_per_request, " (--max_keys_per_request)"));
  }
  // No map change during the import: the buckets stay another shard's.
  absl::MutexLock set_lock(&set_map_mu_);
  for (const v1::BucketRows& rows : request.rows()) {
    const uint64_t table_hash = HashString(rows.table());
    std::vector<uint32_t> buckets;
    for (FeatureId key : rows.keys()) {
      buckets.push_back(BucketOf(table_hash, key));
    }
    for (FeatureId key : rows.absent_keys()) {
      buckets.push_back(BucketOf(table_hash, key));
    }
    STRATA_RETURN_IF_ERROR(CheckNotOwned(buckets));
    auto write = [&] {
      return server_internal::WriteMovedRows(*options_.store, rows);
    };
    if (options_.replica_group == nullptr) {
      STRATA_RETURN_IF_ERROR(write());
      continue;
    }
    // Each block is one entry of the group's log, so that the target's
    // followers hold what its primary holds.
    v1::ReplicationEntry entry;
    *entry.mutable_moved_rows() = rows;
    STRATA_RETURN_IF_ERROR(
        options_.replica_group->ReplicateMoveUpdate(std::move(entry), write));
  }
  return absl::OkStatus();
}

absl::Status ShardService::DropMovedRows(const v1::MoveBucketsRequest& request,
                                         v1::MoveBucketsResponse& response) {
  STRATA_ASSIGN_OR_RETURN(BucketSet buckets, ParseBuckets(request.buckets()));
  absl::MutexLock set_lock(&set_map_mu_);
  STRATA_RETURN_IF_ERROR(CheckNotOwned(std::vector<uint32_t>(
      request.buckets().begin(), request.buckets().end())));
  uint64_t dropped = 0;
  auto drop = [&]() -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(
        dropped, server_internal::DropRowsOfBuckets(*options_.store, buckets));
    return absl::OkStatus();
  };
  if (options_.replica_group == nullptr) {
    STRATA_RETURN_IF_ERROR(drop());
  } else {
    // Through the group's log: a follower promoted later holds no rows of
    // buckets its shard gave away.
    v1::ReplicationEntry entry;
    entry.mutable_dropped_buckets()->mutable_buckets()->Add(
        request.buckets().begin(), request.buckets().end());
    STRATA_RETURN_IF_ERROR(
        options_.replica_group->ReplicateMoveUpdate(std::move(entry), drop));
  }
  if (dropped > 0) {
    STRATA_LOG(INFO, "server")
        << "dropped " << dropped << " rows of " << buckets.count()
        << " buckets this shard does not own";
  }
  response.set_rows_dropped(dropped);
  return absl::OkStatus();
}

}  // namespace strata
