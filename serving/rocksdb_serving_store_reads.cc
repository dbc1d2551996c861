// The reads of RocksDbServingStore: lookups through the row cache, tables
// and positions.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "serving/internal/rocksdb_serving_store.h"
#include "serving/internal/row_format.h"

namespace strata {
namespace serving_internal {

ShardPosition RocksDbServingStore::Position(uint32_t shard_index) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = shards_.find(shard_index);
  return it == shards_.end() ? ShardPosition() : it->second.position;
}

std::vector<ServingTableStats> RocksDbServingStore::ListTables() {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<ServingTableStats> out;
  for (const auto& [name, entry] : tables_) {
    auto count = row_counts_.find(entry->id);
    out.push_back(
        {entry->config, count == row_counts_.end() ? 0 : count->second});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.config.name < b.config.name;
  });
  return out;
}

absl::StatusOr<EmbeddingTableConfig> RocksDbServingStore::GetTableConfig(
    absl::string_view table) {
  Entry entry = FindTable(table);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown table '", table, "'"));
  }
  return entry->config;
}

absl::StatusOr<size_t> RocksDbServingStore::Lookup(
    absl::string_view table, absl::Span<const FeatureId> keys,
    absl::Span<float> out) {
  Entry entry = FindTable(table);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown table '", table, "'"));
  }
  const size_t dim = entry->config.dim;
  if (out.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", table, "' has dimension ", dim, ": ", keys.size(),
        " keys need ", keys.size() * dim, " values, not ", out.size()));
  }
  std::vector<size_t> misses;
  std::vector<uint64_t> tickets;
  cache_.GetMany(entry->id, keys, dim, out, misses, tickets);
  if (misses.empty()) return 0;
  std::vector<std::string> row_keys;
  for (size_t i : misses) row_keys.push_back(RowKey(entry->id, keys[i]));
  std::vector<rocksdb::Slice> slices(row_keys.begin(), row_keys.end());
  std::vector<rocksdb::PinnableSlice> found(misses.size());
  std::vector<rocksdb::Status> statuses(misses.size());
  db_->MultiGet(rocksdb::ReadOptions(), values(), misses.size(), slices.data(),
                found.data(), statuses.data());
  size_t missing = 0;
  for (size_t m = 0; m < misses.size(); ++m) {
    const size_t i = misses[m];
    float* row = out.data() + i * dim;
    if (!statuses[m].ok() && !statuses[m].IsNotFound()) {
      return absl::InternalError(
          absl::StrCat("serving store read failed: ", statuses[m].ToString()));
    }
    // A row of another size belongs to a table whose dimension just changed.
    if (statuses[m].ok() &&
        found[m].size() ==
            dim * sizeof(float) + serving_internal::kStampBytes) {
      std::memcpy(row, found[m].data(), dim * sizeof(float));
      cache_.Offer({entry->id, keys[i]}, tickets[m], absl::MakeSpan(row, dim));
      continue;
    }
    ++missing;
    if (options_.unknown_keys == UnknownKeyPolicy::kInitializer) {
      entry->initializer.Fill(keys[i], static_cast<uint32_t>(dim), row);
    } else {
      std::fill(row, row + dim, 0.0f);
    }
  }
  return missing;
}

}  // namespace serving_internal
}  // namespace strata
