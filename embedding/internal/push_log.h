#ifndef STRATA_EMBEDDING_INTERNAL_PUSH_LOG_H_
#define STRATA_EMBEDDING_INTERNAL_PUSH_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "embedding/replication_position.h"
#include "embedding/table_config.h"
#include "rocksdb/env.h"

namespace strata {
namespace embedding_internal {

// The rows one push left in one table: per key, dim values then state_dim
// optimizer state floats.
struct PushLogRows {
  TableId table = 0;
  uint32_t dim = 0;
  uint32_t state_dim = 0;
  absl::Span<const FeatureId> keys;
  const float* rows = nullptr;  // keys.size() * (dim + state_dim) floats
};

// One applied push as the log holds it.
struct PushLogRecord {
  std::string client_id;  // empty: the push was not deduplicated
  uint64_t client_sequence = 0;
  ReplicationPosition replication;
  std::vector<PushLogRows> tables;
};

// The redo log of a shard under group durability: each push's new rows,
// appended (write(2), no fsync) before the push is acknowledged, so that
// it survives the death of the process, while RocksDB gets the rows only
// from the periodic flush, once per row however often it was pushed.
//
// The log is a directory of numbered segments. A flush cut closes the
// current segment (Rotate) and, once its rows are written to RocksDB,
// deletes the segments before it (DeleteBefore). After a crash, Replay
// reads what is left, oldest first; the last record of a key carries its
// latest row.
//
// A record is a 16-byte header (magic, payload length, CRC-32C of the
// payload) and its payload. A record cut short at the end of a segment
// (the process died inside the write, or the disk filled) was never
// acknowledged and is skipped; a whole record whose checksum fails is
// DATA_LOSS. After a failed append the next one starts a new segment, so
// that no record follows a torn one. Files go through `env`, the seam
// where tests inject faults. Thread-safe.
class PushLog {
 public:
  PushLog(rocksdb::Env* env, std::string dir);
  ~PushLog();

  // Creates the directory and numbers new segments after the existing
  // ones. Reads nothing.
  absl::Status Start();
  // Appends `record` to the current segment (a new one if none is open).
  // On failure the segment is abandoned: RESOURCE_EXHAUSTED for a full
  // disk, INTERNAL otherwise, naming the file.
  absl::Status Append(const PushLogRecord& record);
  // Closes the current segment: later records go to a new one. Returns the
  // number of that new segment; every segment below it holds only records
  // appended before the call.
  uint64_t Rotate();
  // Deletes the segments numbered below `segment`.
  absl::Status DeleteBefore(uint64_t segment);
  // Bytes appended to the segments still on disk (since the last delete).
  uint64_t bytes() const;
  // Whether any segment file exists (from this process or an earlier one).
  bool empty() const;

  // Visits every record of every segment in `dir`, oldest first. The rows'
  // spans point into a buffer valid during the call only.
  using RecordVisitor = std::function<absl::Status(const PushLogRecord&)>;
  static absl::Status Replay(rocksdb::Env* env, const std::string& dir,
                             const RecordVisitor& visit);

  static constexpr uint32_t kMagic = 0x4C505453;  // "STPL"
  static constexpr size_t kHeaderBytes = 16;

 private:
  struct Segment {
    uint64_t number = 0;
    uint64_t bytes = 0;
  };
  static absl::StatusOr<std::vector<uint64_t>> ListSegments(
      rocksdb::Env* env, const std::string& dir);
  absl::Status OpenSegmentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteLocked(const PushLogRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  rocksdb::Env* const env_;
  const std::string dir_;
  mutable absl::Mutex mu_;
  std::unique_ptr<rocksdb::WritableFile> file_ ABSL_GUARDED_BY(mu_);
  uint64_t file_number_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_number_ ABSL_GUARDED_BY(mu_) = 1;
  // Segments on disk (oldest first) and the bytes appended to each.
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedding_internal
}  // namespace strata

#endif  // STRATA_EMBEDDING_INTERNAL_PUSH_LOG_H_
