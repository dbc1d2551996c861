#ifndef STRATA_WORKER_TRAINING_TRAINER_H_
#define STRATA_WORKER_TRAINING_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "proto/strata.pb.h"
#include "worker/data/criteo_reader.h"
#include "worker/model/dense_model.h"
#include "worker/model/dense_optimizer.h"
#include "worker/training/batch_pipeline.h"
#include "worker/training/feature_tables.h"
#include "worker/training/progress_csv.h"
#include "worker/training/tensorboard_events.h"

namespace strata {

class AsyncPusher;
class Collective;
class FileSystem;
class PsClient;
class TrainingMetrics;

struct EvalResult {
  int64_t examples = 0;
  double auc = 0;
  double log_loss = 0;
};

// What a rank reports at each progress interval (the same numbers on every
// rank: they are allreduced).
struct ProgressReport {
  int64_t step = 0;
  int epoch = 0;
  int64_t examples = 0;              // all ranks, since the start of this run
  double samples_per_second = 0;     // all ranks, over the last interval
  double loss = 0;                   // mean over the last interval's examples
  const EvalResult* eval = nullptr;  // when an evaluation just ran
};

struct TrainingResult {
  int64_t steps = 0;     // global step at the end (restored steps included)
  int64_t examples = 0;  // trained in this run, all ranks
  double seconds = 0;
  double samples_per_second = 0;
  // CPU seconds (user + system, every thread of this process) over the
  // training loop, the same span as `seconds`.
  double cpu_seconds = 0;
  double final_loss = 0;        // mean over the last progress interval
  EvalResult eval;              // examples == 0 when there is no eval set
  int64_t malformed_lines = 0;  // this rank's
};

struct TrainerOptions {
  ModelConfig model;
  DenseOptimizerConfig dense_optimizer;
  // The embedding table of every categorical field (keys of different
  // fields never collide). Created by rank 0 when missing; name and dim are
  // filled in from `table` and the model.
  std::string table = "dlrm_embeddings";
  v1::TableConfig table_config;
  // Or the fields grouped into tables of their own (a model config file):
  // every field in exactly one, each config's dim at most the model's
  // embedding_dim (0: that width; a narrower table's rows enter the model
  // zero-padded).
  // Each is created by rank 0 when missing. Empty: `table` for every field.
  std::vector<FeatureTable> feature_tables;
  // The wide (first-order) term beside the DLRM, as in Wide&Deep and
  // DeepFM: one weight per key in this dim-1 table, summed into the
  // example's logit, so that signal carried by single features is learned
  // as a logistic regression learns it. Empty: none. Created by rank 0 when
  // missing, from wide_table_config (name and dim filled in).
  std::string wide_table;
  v1::TableConfig wide_table_config;
  // Training files and batch size; rank and world_size are set from the
  // collective.
  CriteoReaderOptions train;
  // Each rank's examples are shuffled within windows of this many
  // (ShuffleWindow; the order follows model.seed and the epoch); 0: file
  // order.
  size_t shuffle_window = 0;
  std::vector<std::string> eval_files;
  // Passes over the training files; 0: chosen from their size
  // (AutoEpochsForRows), counted before training.
  int epochs = 1;
  int64_t max_steps = 0;         // 0: no limit
  int64_t eval_every_steps = 0;  // 0: only at the end
  absl::Duration progress_interval = absl::Seconds(10);
  // Rank 0 appends every progress report to this CSV (progress_csv.h);
  // empty: none.
  std::string progress_file;
  // Rank 0 writes every progress report's loss, samples/s and evaluation
  // as TensorBoard scalars to an event file in this folder
  // (tensorboard_events.h); empty: none.
  std::string tensorboard_dir;
  // 0: synchronous (each pull sees every rank's pushes of earlier steps).
  // k >= 1: the next k batches are pulled while a step computes and up to k
  // pushes are in flight.
  int staleness = 1;
  // The client of the pulls (training and evaluation), when not the one
  // given to Create: strata-worker --pull_fp16 pulls rows as fp16 through
  // a client of its own while pushes stay float32. Not owned; nullptr: the
  // trainer's client.
  PsClient* pull_ps = nullptr;
  std::string checkpoint_dir;  // rank 0's dense checkpoints; empty: none
  int64_t checkpoint_every_steps = 0;  // 0: only at the end
  // Every this many checkpoints is a full PS checkpoint; the others are
  // incremental (rows changed since the previous one). 1: all full.
  int64_t full_checkpoint_every = 1;
  bool restore = false;  // resume from checkpoint_dir's LATEST
  Clock* clock = Clock::Real();
  FileSystem* fs = nullptr;  // default: FileSystem::Default()
  // Called on every rank after every step with the new dense parameters
  // (tests compare ranks).
  std::function<void(int64_t step, absl::Span<const float> parameters)> on_step;
  // Called at every progress interval; default: a log line on rank 0.
  std::function<void(const ProgressReport&)> on_progress;
  // Updated every step and progress interval when set (a metrics port).
  // Not owned.
  TrainingMetrics* metrics = nullptr;
};

// With epochs = 0, training over `rows` rows makes enough passes to train
// on kAutoEpochExamples examples, at most kMaxAutoEpochs:
// ceil(kAutoEpochExamples / rows) clamped to 1..kMaxAutoEpochs.
// Small data needs several passes before rows and MLPs have moved; large
// data one.
inline constexpr int64_t kAutoEpochExamples = 2'000'000;
inline constexpr int kMaxAutoEpochs = 10;
int AutoEpochsForRows(int64_t rows);

// The training loop of one rank: data-parallel DLRM training with the
// embeddings on the PS and the dense parameters replicated.
//
// Each step: take the next prepared batch (read and pulled ahead by a
// BatchPipeline), forward and backward, allreduce the dense gradient with
// the example and loss counts, divide by the global example count, apply
// the dense optimizer (same on every rank), and push the batch's row
// gradients (also divided by the global count) through an AsyncPusher.
// A rank out of data contributes zeros; training ends when every rank is.
// Not thread-safe; the objects passed in must outlive the trainer.
class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      TrainerOptions options, PsClient* ps, Collective* collective,
      std::unique_ptr<DenseModel> model);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (epochs or max_steps). Every rank must call it.
  absl::StatusOr<TrainingResult> Run();

  // Exact AUC and log loss of the current model on eval_files, each rank
  // predicting a slice. Every rank must call it at the same point.
  absl::StatusOr<EvalResult> Evaluate();

 private:
  Trainer(TrainerOptions options, PsClient* ps, Collective* collective,
          std::unique_ptr<DenseModel> model,
          std::unique_ptr<DenseOptimizer> optimizer);

  absl::Status Setup();
  absl::Status RestoreFromCheckpoint();
  absl::Status SyncStateFromRankZero();
  // The PS half of a checkpoint: full or incremental as
  // full_checkpoint_every says; may change `id` (a full one after a refused
  // delta).
  absl::Status TakePsCheckpoint(std::string& id);
  // Queues the pushes of `row_gradients` (one row per unique key of
  // `batch`, scaled) to the keys' tables, as of global step `step`.
  absl::Status PushRows(PreparedBatch& batch, std::vector<float> row_gradients,
                        uint64_t step);
  // Keys pushed so far, every table's.
  int64_t PushedKeys() const;
  // Waits for every push in flight (every table's).
  absl::Status DrainPushes();
  absl::Status Checkpoint();
  absl::Status PredictSlice(size_t begin, size_t end,
                            std::vector<float>* predictions);
  void ReportProgress(const EvalResult* eval);
  void WriteTensorBoard(const ProgressReport& report);

  // The client of pulls: options_.pull_ps, or the trainer's.
  PsClient* pull_ps() const {
    return options_.pull_ps != nullptr ? options_.pull_ps : ps_;
  }

  TrainerOptions options_;
  PsClient* const ps_;
  Collective* const collective_;
  std::unique_ptr<DenseModel> model_;
  std::unique_ptr<DenseOptimizer> optimizer_;
  FileSystem* fs_;
  FieldTables field_tables_;  // from options_.feature_tables

  std::vector<float> parameters_;
  int64_t step_ = 0;
  int64_t checkpoints_taken_ = 0;  // by this process, for full_checkpoint_every
  int epoch_ = 0;                  // epochs finished before this run's data
  int64_t batches_in_epoch_ = 0;   // this rank's, of the current epoch
  std::unique_ptr<Batch> eval_data_;  // loaded on first Evaluate
  std::vector<std::unique_ptr<AsyncPusher>> pushers_;  // per table, in Run
  std::unique_ptr<AsyncPusher> wide_pusher_;           // with a wide table
  std::unique_ptr<ProgressCsv> progress_csv_;  // rank 0 with progress_file
  // Rank 0 with tensorboard_dir, until a write fails (logged once).
  std::unique_ptr<TensorBoardEvents> tensorboard_;
  absl::Time run_start_;

  // Progress accounting since the last report.
  absl::Time interval_start_;
  int64_t interval_examples_ = 0;
  double interval_loss_ = 0;
  int64_t run_examples_ = 0;
  double last_loss_ = 0;
  int current_epoch_ = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_TRAINING_TRAINER_H_
