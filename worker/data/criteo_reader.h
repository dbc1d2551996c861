#ifndef STRATA_WORKER_DATA_CRITEO_READER_H_
#define STRATA_WORKER_DATA_CRITEO_READER_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/criteo_format.h"

namespace strata {

// A batch of examples as struct-of-arrays, row-major:
// dense[i * kCriteoNumDense + j] is I(j+1) of example i, and the keys of
// C(f+1) of example i (see CriteoFeatureKey) are keys[field_offsets[i *
// kCriteoNumCategorical + f], field_offsets[i * kCriteoNumCategorical + f +
// 1]): one per field on single-hot data, where keys[i * kCriteoNumCategorical
// + f] is that key. Which embedding table a field's keys go to is the
// model's choice.
struct Batch {
  std::vector<float> labels;   // 0 or 1
  std::vector<float> dense;    // size() * kCriteoNumDense
  std::vector<uint64_t> keys;  // every example's, field by field
  // size() * kCriteoNumCategorical + 1 (empty before the first Append).
  std::vector<uint32_t> field_offsets;

  size_t size() const { return labels.size(); }
  void Clear();
  void Append(const CriteoExample& example);
  // Appends examples [begin, end) of `other`.
  void AppendRange(const Batch& other, size_t begin, size_t end);
};

struct CriteoReaderOptions {
  // Files read in this order. Required.
  std::vector<std::string> files;
  // Examples per batch; the last batch of an epoch may be smaller.
  int batch_size = 1024;
  // Default false: a malformed line is counted and skipped with a
  // (rate-limited) warning. True: reading stops with INVALID_ARGUMENT naming
  // file:line.
  bool strict = false;
  // This reader's share of the input: rank in 0..world_size-1.
  int rank = 0;
  int world_size = 1;
  // kLines (default): line k of the input (counted over all files in order,
  // from 0) belongs to rank k mod world_size; every rank reads every file but
  // parses only its own lines. kFiles: file k belongs to rank k mod
  // world_size; every rank must get at least one file.
  enum class ShardBy { kLines, kFiles };
  ShardBy shard_by = ShardBy::kLines;
};

// Counts over this rank's lines, cumulative over epochs.
struct CriteoReaderStats {
  int64_t lines = 0;      // lines of this rank, malformed included
  int64_t examples = 0;   // lines parsed into examples
  int64_t malformed = 0;  // lines skipped
  int64_t malformed_by_kind[kNumCriteoLineErrors] = {};  // by CriteoLineError
};

// Reads Criteo-format text files as batches, one rank's shard of them.
// Not thread-safe; one reader per thread. Owns its open file.
//
//   STRATA_ASSIGN_OR_RETURN(auto reader, CriteoReader::Open(options));
//   Batch batch;
//   while (true) {
//     STRATA_RETURN_IF_ERROR(reader->ReadBatch(&batch));
//     if (batch.size() == 0) break;  // end of epoch
//     Train(batch);
//   }
//   STRATA_RETURN_IF_ERROR(reader->StartNextEpoch());
class CriteoReader {
 public:
  // INVALID_ARGUMENT for bad options (no files, batch_size < 1, rank outside
  // 0..world_size-1, a rank without files under kFiles); NOT_FOUND or
  // PERMISSION_DENIED if a file of this rank cannot be opened.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(
      CriteoReaderOptions options);

  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // Replaces `batch` with the next up to batch_size examples of this rank; an
  // empty batch means the epoch has ended (and keeps ending until
  // StartNextEpoch). Errors: INVALID_ARGUMENT for a malformed line under
  // strict; NOT_FOUND/DATA_LOSS/INTERNAL for a file that cannot be opened or
  // read. After an error the reader should be discarded.
  absl::Status ReadBatch(Batch* batch);

  // Rewinds to the first line of this rank's shard.
  absl::Status StartNextEpoch();

  int epoch() const { return epoch_; }  // 0 for the first
  const CriteoReaderStats& stats() const { return stats_; }

 private:
  explicit CriteoReader(CriteoReaderOptions options);
  bool OwnsLine() const;
  absl::Status OpenNextFile();
  absl::Status ReadLine(bool* eof);
  absl::Status HandleMalformed(CriteoLineError kind, const absl::Status& error);

  const CriteoReaderOptions options_;
  std::vector<size_t> my_files_;  // indices into options_.files
  size_t next_file_ = 0;          // into my_files_
  std::FILE* file_ = nullptr;
  const std::string* file_name_ = nullptr;
  int64_t line_in_file_ = 0;     // 1-based number of the current line
  int64_t global_line_ = -1;     // 0-based over the whole input
  char* line_buffer_ = nullptr;  // owned by getline(3)
  size_t line_capacity_ = 0;
  ssize_t line_length_ = 0;
  int epoch_ = 0;
  bool epoch_done_ = false;
  CriteoReaderStats stats_;
};

// Reads every example of `options`' shard (one epoch) into one batch;
// options.batch_size is ignored. For evaluation sets.
absl::StatusOr<Batch> ReadAllCriteoExamples(CriteoReaderOptions options);

// The non-empty lines of `files` (all ranks' shares), counting stops at
// `limit`: min(lines, limit). Reads no more than it needs. NOT_FOUND for a
// file that cannot be opened, DATA_LOSS for one that cannot be read.
absl::StatusOr<int64_t> CountCriteoLines(const std::vector<std::string>& files,
                                         int64_t limit);

}  // namespace strata

#endif  // STRATA_WORKER_DATA_CRITEO_READER_H_
