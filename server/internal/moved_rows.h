#ifndef STRATA_SERVER_INTERNAL_MOVED_ROWS_H_
#define STRATA_SERVER_INTERNAL_MOVED_ROWS_H_

#include <bitset>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/hash.h"
#include "embedding/embedding_store.h"
#include "proto/strata.pb.h"

namespace strata {
namespace server_internal {

// The rows of a bucket move between the store and the wire. A shard's
// IMPORT and DROP steps use these, and so does a follower of a replicated
// shard applying the same steps from its primary's log.

void MovedRowsToProto(const RowBlock& block, v1::BucketRows* rows);

// The block of `rows`, checked against the table's dimensions before any
// float is copied (INVALID_ARGUMENT naming the sizes).
absl::StatusOr<RowBlock> MovedRowsFromProto(const v1::BucketRows& rows,
                                            const EmbeddingTableConfig& config);

// Writes `rows` into `store` (EmbeddingStore::WriteRows: synced, replacing
// the keys' rows and deleting the absent ones). NOT_FOUND for an unknown
// table.
absl::Status WriteMovedRows(EmbeddingStore& store, const v1::BucketRows& rows);

// Deletes every row of every table whose bucket is in `buckets`; returns
// how many.
absl::StatusOr<uint64_t> DropRowsOfBuckets(
    EmbeddingStore& store, const std::bitset<kNumBuckets>& buckets);

}  // namespace server_internal
}  // namespace strata

#endif  // STRATA_SERVER_INTERNAL_MOVED_ROWS_H_
