#ifndef STRATA_WORKER_TRAINING_BATCH_PIPELINE_H_
#define STRATA_WORKER_TRAINING_BATCH_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/default_init_allocator.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/shuffle_window.h"
#include "worker/model/dense_model.h"
#include "worker/training/key_index.h"

namespace strata {

class PsClient;

// Which PS table holds each categorical field's rows (keys of different
// fields never collide, so each key has one table).
struct FieldTables {
  std::vector<std::string> names;  // at least one
  // Index into names of each field's table; empty: every field in names[0].
  std::vector<int> table_of_field;
  // The row width of each table, at most the model's embedding_dim; empty:
  // every table has the model's width. A narrower table's rows enter the
  // model zero-padded, and only their own components are pushed back.
  std::vector<int> dims;

  // Each table's width, for a model of `embedding_dim`.
  std::vector<int> WidthsFor(int embedding_dim) const;
};

// A batch ready for the model: its examples, the unique keys of its
// categorical features, where each (example, field) finds its row among
// them, and the rows pulled from the PS.
struct PreparedBatch {
  Batch examples;
  std::vector<uint64_t> unique_keys;
  std::vector<uint32_t> offsets;  // examples.size() * num_fields + 1
  std::vector<uint32_t> rows;     // into unique_keys
  // unique_keys.size() x embedding_dim; a narrower table's rows padded
  // with zeros. Not zeroed when sized: the pull writes every value.
  std::vector<float, DefaultInitAllocator<float>> embeddings;
  // With several tables: the table of each unique key (an index into
  // FieldTables::names). Empty with one table.
  std::vector<int> key_tables;
  // With a wide term: each example's sum of its keys' weights (the logit
  // offsets). Empty without one.
  std::vector<float> wide_logits;
  int epoch = 0;  // of the pipeline's epochs, from 0

  // A view for DenseModel; valid while this batch lives.
  ModelBatch View() const;
};

// Indexes the keys of `batch`'s examples (fills unique_keys, in order of
// first appearance, and offsets and rows: one or more keys per field, as
// multi-hot fields are pooled by the model) and pulls their rows
// from their fields' `tables` (dimension `embedding_dim`; one pull per
// table); with a `wide_table` (dim 1), also their weights, each example's
// summed into wide_logits (every key of every field once per occurrence).
// What training and evaluation both do; `key_index` numbers the keys and is
// kept by the caller from batch to batch.
absl::Status IndexAndPull(PsClient& ps, const FieldTables& tables,
                          int embedding_dim, const std::string& wide_table,
                          KeyIndex* key_index, PreparedBatch* batch);

// The keys of one table and their values (dim floats each).
struct TableRows {
  std::vector<uint64_t> keys;
  std::vector<float> values;
};

// `values` (one row of `dim` per unique key of `batch`, or empty for keys
// only) split by the keys' tables: one TableRows per table of
// `table_widths`, keys in batch order, each row cut to the first
// table_widths[t] <= dim floats. REQUIRES: every key_tables entry <
// table_widths.size().
std::vector<TableRows> SplitRowsByTable(const PreparedBatch& batch,
                                        absl::Span<const float> values, int dim,
                                        absl::Span<const int> table_widths);

// The wide weights' gradients of the summed loss, times `scale`: each key
// gets p_i - y_i (the logit's gradient) for every occurrence in example i.
// One value per unique key.
std::vector<float> WideGradients(const PreparedBatch& batch,
                                 absl::Span<const float> probabilities,
                                 float scale);

struct BatchPipelineOptions {
  CriteoReaderOptions reader;
  int epochs = 1;
  // Batches to skip at the start (resuming from a checkpoint): read and
  // dropped without a pull.
  int64_t skip_batches = 0;
  // Batches read and pulled ahead of the one being trained; 0 runs each
  // Next() synchronously on the caller's thread.
  int depth = 1;
  // Examples shuffled together (ShuffleWindow), rounded up to whole
  // batches; 0: file order. The order
  // follows shuffle_seed and the epoch, counted from first_epoch (a resumed
  // run's).
  size_t shuffle_window = 0;
  uint64_t shuffle_seed = 1;
  int first_epoch = 0;
  FieldTables tables;
  int embedding_dim = 16;
  std::string wide_table;  // empty: no wide term
  PsClient* ps = nullptr;  // not owned
};

// Reads, indexes and pulls batches on a background thread so that the next
// batches' input and pull overlap the current step's compute. Next() hands
// them out in order. Thread-safe for one consumer.
class BatchPipeline {
 public:
  static absl::StatusOr<std::unique_ptr<BatchPipeline>> Start(
      BatchPipelineOptions options);
  ~BatchPipeline();
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next batch, or null once every epoch has been read. An error of
  // the reader or of a pull ends the pipeline and is returned here.
  absl::StatusOr<std::unique_ptr<PreparedBatch>> Next();

  // Malformed lines skipped so far (reader statistics).
  int64_t malformed_lines() const;

 private:
  explicit BatchPipeline(BatchPipelineOptions options);
  // One batch (or null at the end) read and pulled on the calling thread.
  absl::StatusOr<std::unique_ptr<PreparedBatch>> Produce();
  void Loop();

  const BatchPipelineOptions options_;
  // The next batch of examples (empty at the end of an epoch) and the
  // start of the next epoch, through the shuffle window when there is one.
  absl::Status ReadExamples(Batch* batch);
  absl::Status StartNextEpoch();

  std::unique_ptr<CriteoReader> reader_;    // used by one thread at a time
  std::unique_ptr<ShuffleWindow> shuffle_;  // with a shuffle_window
  KeyIndex key_index_;                      // used by one thread at a time
  int epoch_ = 0;
  int64_t skipped_ = 0;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<PreparedBatch>> ready_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t malformed_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_BATCH_PIPELINE_H_
