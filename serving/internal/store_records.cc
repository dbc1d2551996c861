#include "serving/internal/store_records.h"

#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "embedding/storage_format.h"
#include "rocksdb/db.h"

namespace strata {
namespace serving_internal {
namespace {

constexpr const char* kTablePrefix = kTableRecordPrefix;
constexpr char kRowCountPrefix[] = "rows/";
constexpr char kShardPrefix[] = "shard/";

absl::StatusOr<StoredShard> DecodeShard(absl::string_view value) {
  const std::vector<absl::string_view> fields =
      absl::StrSplit(value, ' ', absl::SkipEmpty());
  StoredShard shard;
  if (fields.size() != 4 ||
      !absl::SimpleAtoi(fields[0], &shard.position.incarnation) ||
      !absl::SimpleAtoi(fields[1], &shard.position.sequence) ||
      !absl::SimpleAtoi(fields[2], &shard.position.acknowledged_micros) ||
      !absl::SimpleAtoi(fields[3], &shard.epoch)) {
    return absl::DataLossError(
        absl::StrCat("malformed shard position '", value, "'"));
  }
  return shard;
}

}  // namespace

std::string StoreRecords::TableKey(absl::string_view name) {
  return absl::StrCat(kTablePrefix, name);
}

std::string StoreRecords::RowCountKey(TableId id) {
  return absl::StrCat(kRowCountPrefix, id);
}

std::string StoreRecords::ShardKey(uint32_t shard_index) {
  return absl::StrCat(kShardPrefix, shard_index);
}

std::string StoreRecords::EncodeShard(const StoredShard& shard) {
  return absl::StrCat(shard.position.incarnation, " ", shard.position.sequence,
                      " ", shard.position.acknowledged_micros, " ",
                      shard.epoch);
}

absl::StatusOr<StoreRecords> LoadStoreRecords(
    rocksdb::DB& db, rocksdb::ColumnFamilyHandle* family) {
  StoreRecords records;
  std::unique_ptr<rocksdb::Iterator> it(
      db.NewIterator(rocksdb::ReadOptions(), family));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::string_view key(it->key().data(), it->key().size());
    const absl::string_view value(it->value().data(), it->value().size());
    if (absl::ConsumePrefix(&key, kTablePrefix)) {
      STRATA_ASSIGN_OR_RETURN(auto table, ParseTableRecord(value));
      records.tables.push_back(std::move(table));
    } else if (absl::ConsumePrefix(&key, kRowCountPrefix)) {
      TableId id = 0;
      uint64_t count = 0;
      if (!absl::SimpleAtoi(key, &id) || !absl::SimpleAtoi(value, &count)) {
        return absl::DataLossError("malformed row count record");
      }
      records.row_counts[id] = count;
    } else if (absl::ConsumePrefix(&key, kShardPrefix)) {
      uint32_t shard_index = 0;
      if (!absl::SimpleAtoi(key, &shard_index)) {
        return absl::DataLossError("malformed shard record");
      }
      STRATA_ASSIGN_OR_RETURN(records.shards[shard_index], DecodeShard(value));
    } else if (key == StoreRecords::kEpochKey) {
      if (!absl::SimpleAtoi(value, &records.last_epoch)) {
        return absl::DataLossError("malformed epoch record");
      }
    }
  }
  if (!it->status().ok()) {
    return absl::DataLossError(absl::StrCat("cannot read the serving store: ",
                                            it->status().ToString()));
  }
  return records;
}

}  // namespace serving_internal
}  // namespace strata
