#ifndef STRATA_SERVING_SERVING_STORE_H_
#define STRATA_SERVING_SERVING_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "embedding/table_config.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace strata {

// What a lookup returns for a key the serving store has no row for.
enum class UnknownKeyPolicy {
  // Zeros.
  kZeros,
  // The table's initializer, the value a training shard would return for the
  // key before its first update (a pure function of (seed, key)).
  kInitializer,
};

absl::StatusOr<UnknownKeyPolicy> ParseUnknownKeyPolicy(absl::string_view name);

struct ServingStoreOptions {
  // Directory of the store's RocksDB database; created when missing.
  // Required.
  std::string data_dir;
  // Rows kept in memory in front of RocksDB (evicted by CLOCK, which
  // approximates least recently used);
  // 0 disables the cache. Default: 1M.
  uint64_t cache_rows = 1 << 20;
  // Default: kZeros.
  UnknownKeyPolicy unknown_keys = UnknownKeyPolicy::kZeros;
  // RocksDB's memtable size (each column family may hold two): memory the
  // store uses besides the cache. Default: 64 MiB.
  size_t write_buffer_bytes = size_t{64} << 20;
  // RocksDB's environment; tests may pass rocksdb::NewMemEnv(). Default:
  // rocksdb::Env::Default().
  rocksdb::Env* rocksdb_env = nullptr;
};

// How far the store has followed one training shard: the shard's
// incarnation and the sequence of the last update applied from it.
struct ShardPosition {
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
  // When the shard acknowledged the newest applied update, microseconds since
  // the Unix epoch; 0 when unknown.
  int64_t acknowledged_micros = 0;
};

// New values of `keys` of one table: keys.size() * dim floats, row-major.
struct RowBatch {
  absl::string_view table;
  absl::Span<const FeatureId> keys;
  absl::Span<const float> values;
};

// Keys of one table whose rows the training shard deleted (evicted).
struct DeletedKeys {
  absl::string_view table;
  absl::Span<const FeatureId> keys;
};

// One atomic change of the store from one training shard.
struct ShardUpdate {
  uint32_t shard_index = 0;
  // Tables created (or whose config changed) on the shard.
  std::vector<EmbeddingTableConfig> tables;
  std::vector<RowBatch> rows;
  // Rows to forget, after `rows` are written; keys without a row are
  // ignored. A lookup of a forgotten key gets the unknown-key answer.
  std::vector<DeletedKeys> deleted;
  // When set, the shard's position advances to it in the same write as the
  // rows, so that after a crash the store resumes exactly after the last
  // update it holds.
  std::optional<ShardPosition> position;
};

struct ServingTableStats {
  EmbeddingTableConfig config;
  uint64_t num_rows = 0;
};

// What the serving store's row cache holds and has done since the store
// was opened.
struct RowCacheStats {
  uint64_t rows = 0;
  // As configured (--cache_rows).
  uint64_t capacity = 0;
  // Rows lookups found in the cache, and those they did not (a disabled
  // cache counts nothing).
  uint64_t hits = 0;
  uint64_t misses = 0;
  // Rows pushed out to make room for others.
  uint64_t evictions = 0;
};

// The serving PS's copy of the rows of every followed training shard:
// values by (table, key) in RocksDB, a cache of rows (CLOCK eviction) in
// front of it, table configs, and per shard the position reached.
//
// Rows are stamped with the shard and the snapshot they came from, so that
// when a shard sends a new snapshot (after a restart or restore) the rows
// it no longer has are deleted at the snapshot's end. Writes from several
// shards may run concurrently; everything is thread-safe. A lookup never
// sees a row go back to an older value.
//
// Example:
//   ServingStoreOptions options;
//   options.data_dir = "/var/lib/strata/serving";
//   auto store = ServingStore::Open(options);
//   ShardUpdate update;
//   update.rows.push_back({"user", keys, values});
//   update.position = ShardPosition{incarnation, sequence, ack_micros};
//   (*store)->Apply(update);
//   (*store)->Lookup("user", keys, absl::MakeSpan(out));
class ServingStore {
 public:
  virtual ~ServingStore() = default;

  // Opens (or creates) the store. INVALID_ARGUMENT for bad options,
  // DATA_LOSS for a corrupt store, INTERNAL when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<ServingStore>> Open(
      const ServingStoreOptions& options);

  // Writes the tables, rows and position of `update` in one atomic write.
  // A table whose dimension changed loses its rows first. INVALID_ARGUMENT
  // for an unknown table, a bad config or values of the wrong size; nothing
  // is written then.
  virtual absl::Status Apply(const ShardUpdate& update) = 0;

  // A snapshot of shard `shard_index` starts: the rows applied until
  // EndSnapshot replace all the shard's rows.
  virtual absl::Status BeginSnapshot(uint32_t shard_index) = 0;
  // Deletes the shard's rows that the snapshot did not write, then sets its
  // position. FAILED_PRECONDITION without a BeginSnapshot.
  virtual absl::Status EndSnapshot(uint32_t shard_index,
                                   const ShardPosition& position) = 0;

  // Forgets an unfinished snapshot (its stream broke); the rows it wrote
  // stay until a later snapshot of the shard ends. OK without one.
  virtual void CancelSnapshot(uint32_t shard_index) = 0;

  // Zeros for a shard never followed.
  virtual ShardPosition Position(uint32_t shard_index) = 0;

  virtual std::vector<ServingTableStats> ListTables() = 0;
  virtual RowCacheStats CacheStats() = 0;
  // NOT_FOUND for an unknown table.
  virtual absl::StatusOr<EmbeddingTableConfig> GetTableConfig(
      absl::string_view table) = 0;

  // Writes keys.size() * dim floats to `out`, the rows of `keys` in order;
  // keys without a row get the default of options.unknown_keys. Returns how
  // many keys had no row. NOT_FOUND for an unknown table, INVALID_ARGUMENT
  // when `out` has the wrong size.
  virtual absl::StatusOr<size_t> Lookup(absl::string_view table,
                                        absl::Span<const FeatureId> keys,
                                        absl::Span<float> out) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVING_SERVING_STORE_H_
