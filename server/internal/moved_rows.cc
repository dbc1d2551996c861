#include "server/internal/moved_rows.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace strata {
namespace server_internal {
namespace {

std::string FloatBytes(const std::vector<float>& floats) {
  return std::string(reinterpret_cast<const char*>(floats.data()),
                     floats.size() * sizeof(float));
}

}  // namespace

void MovedRowsToProto(const RowBlock& block, v1::BucketRows* rows) {
  rows->set_table(block.table);
  rows->mutable_keys()->Add(block.keys.begin(), block.keys.end());
  rows->set_values(FloatBytes(block.values));
  rows->set_states(FloatBytes(block.states));
  rows->mutable_absent_keys()->Add(block.absent.begin(), block.absent.end());
}

absl::StatusOr<RowBlock> MovedRowsFromProto(
    const v1::BucketRows& rows, const EmbeddingTableConfig& config) {
  const size_t n = static_cast<size_t>(rows.keys_size());
  const size_t state_dim = OptimizerStateDim(config.optimizer.type, config.dim);
  if (rows.values().size() != n * config.dim * sizeof(float) ||
      rows.states().size() != n * state_dim * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MoveBuckets: rows of table '", rows.table(), "' hold ",
                     rows.values().size(), " value and ", rows.states().size(),
                     " state bytes for ", n, " keys; the table needs ",
                     n * config.dim * sizeof(float), " and ",
                     n * state_dim * sizeof(float)));
  }
  RowBlock block;
  block.table = rows.table();
  block.keys.assign(rows.keys().begin(), rows.keys().end());
  block.values.resize(n * config.dim);
  std::memcpy(block.values.data(), rows.values().data(), rows.values().size());
  block.states.resize(n * state_dim);
  std::memcpy(block.states.data(), rows.states().data(), rows.states().size());
  block.absent.assign(rows.absent_keys().begin(), rows.absent_keys().end());
  return block;
}

absl::Status WriteMovedRows(EmbeddingStore& store, const v1::BucketRows& rows) {
  STRATA_ASSIGN_OR_RETURN(EmbeddingTableConfig config,
                          store.GetTableConfig(rows.table()));
  STRATA_ASSIGN_OR_RETURN(RowBlock block, MovedRowsFromProto(rows, config));
  return store.WriteRows(block);
}

absl::StatusOr<uint64_t> DropRowsOfBuckets(
    EmbeddingStore& store, const std::bitset<kNumBuckets>& buckets) {
  uint64_t dropped = 0;
  for (const TableStats& table : store.ListTables()) {
    const uint64_t table_hash = HashString(table.config.name);
    STRATA_ASSIGN_OR_RETURN(
        uint64_t n, store.DropRows(table.config.name, [&](FeatureId key) {
          return buckets[BucketOf(table_hash, key)];
        }));
    dropped += n;
  }
  return dropped;
}

}  // namespace server_internal
}  // namespace strata
