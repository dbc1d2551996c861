#include "embedding/storage_format.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata {

std::string RowKey(TableId table, FeatureId key) {
  char buf[kRowKeyBytes];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>(table >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) {
    buf[4 + i] = static_cast<char>(key >> (56 - 8 * i));
  }
  return std::string(buf, sizeof(buf));
}

bool ParseRowKey(absl::string_view bytes, TableId* table, FeatureId* key) {
  if (bytes.size() != kRowKeyBytes) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  *table = 0;
  *key = 0;
  for (int i = 0; i < 4; ++i) *table = (*table << 8) | p[i];
  for (int i = 4; i < 12; ++i) *key = (*key << 8) | p[i];
  return true;
}

std::string TableRecordKey(absl::string_view name) {
  return absl::StrCat(kTableRecordPrefix, name);
}

std::string TableRecordValue(TableId id, const EmbeddingTableConfig& config) {
  return absl::StrCat(id, " ", SerializeTableConfig(config));
}

absl::StatusOr<std::pair<TableId, EmbeddingTableConfig>> ParseTableRecord(
    absl::string_view value) {
  std::pair<absl::string_view, absl::string_view> id_and_config =
      absl::StrSplit(value, absl::MaxSplits(' ', 1));
  TableId id = 0;
  if (!absl::SimpleAtoi(id_and_config.first, &id)) {
    return absl::DataLossError(
        absl::StrCat("table record '", value, "' has a bad id"));
  }
  absl::StatusOr<EmbeddingTableConfig> config =
      ParseTableConfig(id_and_config.second);
  if (!config.ok()) {
    return absl::DataLossError(absl::StrCat("table record '", value,
                                            "': ", config.status().message()));
  }
  return std::make_pair(id, *std::move(config));
}

}  // namespace strata
