#ifndef STRATA_EMBEDDING_STORAGE_FORMAT_H_
#define STRATA_EMBEDDING_STORAGE_FORMAT_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "embedding/table_config.h"

namespace strata {

// The on-disk format of the training store that other components read too
// (the serving PS loads training checkpoints, and keeps its rows the same
// way).

// Row keys of the "values" and "optimizer" column families: the big-endian
// table id, then the big-endian feature id, so that each table's rows are
// contiguous and ordered.
inline constexpr size_t kRowKeyBytes = 12;
std::string RowKey(TableId table, FeatureId key);
// False when `bytes` is not a row key.
bool ParseRowKey(absl::string_view bytes, TableId* table, FeatureId* key);

// Table records of the "default" column family: key "table/<name>", value
// "<table id> <SerializeTableConfig text>".
inline constexpr char kTableRecordPrefix[] = "table/";
std::string TableRecordKey(absl::string_view name);
std::string TableRecordValue(TableId id, const EmbeddingTableConfig& config);
// DATA_LOSS naming the record when it does not parse.
absl::StatusOr<std::pair<TableId, EmbeddingTableConfig>> ParseTableRecord(
    absl::string_view value);

}  // namespace strata

#endif  // STRATA_EMBEDDING_STORAGE_FORMAT_H_
