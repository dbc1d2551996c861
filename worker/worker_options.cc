#include "worker/worker_options.h"

#include <cstdint>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_system.h"
#include "common/table_policy_flags.h"
#include "worker/training/feature_tables.h"
#ifdef STRATA_WITH_CUDA
#include "worker/collective/nccl_collective.h"
#endif

ABSL_FLAG(std::string, shards, "",
          "Comma-separated host:port of every training shard, in shard "
          "order (required).");
ABSL_FLAG(int, rank, 0, "This worker's rank, 0..num_workers-1.");
ABSL_FLAG(int, num_workers, 1, "Number of worker ranks in the job.");
ABSL_FLAG(std::string, rendezvous, "",
          "host:port of the shard whose rendezvous service the ranks meet "
          "through; default: the first of --shards.");
ABSL_FLAG(std::string, job_id, "strata-job",
          "Names this job at the rendezvous. Give each run its own (e.g. with "
          "a timestamp), so that ranks never meet a former run's addresses.");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address this rank listens on for its peers (Gloo TCP).");
ABSL_FLAG(std::string, train_files, "",
          "Comma-separated Criteo-format training files (required); ranks "
          "take alternate lines.");
ABSL_FLAG(std::string, eval_files, "",
          "Comma-separated held-out files for exact AUC and log loss.");
ABSL_FLAG(bool, strict, false,
          "Stop at the first malformed line instead of skipping it.");
ABSL_FLAG(int, batch_size, 1024, "Examples per rank per step.");
ABSL_FLAG(int, epochs, 0,
          "Passes over the training files; 0 (the default): chosen from "
          "their size, enough passes for 2,000,000 examples, at most 10 (the "
          "lines are counted first).");
ABSL_FLAG(int64_t, max_steps, 0, "Stop after this many steps; 0: no limit.");
ABSL_FLAG(int, embedding_dim, 16, "Embedding dimension of every field.");
ABSL_FLAG(std::string, bottom_mlp, "64",
          "Hidden widths of the bottom MLP (a last layer of embedding_dim is "
          "added).");
ABSL_FLAG(std::string, top_mlp, "128,64",
          "Hidden widths of the top MLP (a last layer of 1 is added).");
ABSL_FLAG(std::string, interaction, "dot", "dot or concat.");
ABSL_FLAG(std::string, pooling, "sum", "Multi-hot pooling: sum or mean.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial dense parameters and rows.");
ABSL_FLAG(std::string, dense_optimizer, "adam", "adam or adagrad.");
ABSL_FLAG(double, dense_learning_rate, 1e-3, "Dense learning rate.");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "Dense learning rate after the warm-up: constant, or rsqrt (times "
          "sqrt(warmup_steps / step)).");
ABSL_FLAG(int64_t, warmup_steps, 0,
          "Steps over which the dense learning rate rises linearly to "
          "--dense_learning_rate; 0: none.");
ABSL_FLAG(int64_t, shuffle_buffer, 100000,
          "Each rank shuffles its examples within windows of this many, "
          "rounded up to whole batches (read, permuted by --seed and the "
          "epoch, trained, then the next window; about 400 bytes per "
          "single-hot example); 0: file order.");
ABSL_FLAG(std::string, table, "dlrm_embeddings",
          "PS table of the embeddings (created by rank 0 when missing); with "
          "--model_config it only names the wide term's <table>_wide.");
ABSL_FLAG(std::string, model_config, "",
          "YAML file grouping the categorical fields into PS tables of their "
          "own, each with its optimizer, admission, eviction and memory "
          "budget (`tables:` a list of name, fields (C1..C26 or ranges such "
          "as C1-C10), and optionally dim, optimizer, learning_rate, "
          "initial_accumulator, init_stddev, admit_min_count, "
          "admit_probability, admit_sketch_width, admit_sketch_depth, "
          "evict_after_steps, evict_after_seconds, evict_min_norm, "
          "memory_budget_mb; a key left out takes this program's flag; dim "
          "is at most --embedding_dim, a narrower table's rows enter the "
          "model zero-padded). Empty: every field in --table.");
ABSL_FLAG(std::string, sparse_optimizer, "adagrad",
          "Optimizer of the embedding rows on the PS: sgd, adagrad, adam or "
          "ftrl.");
ABSL_FLAG(double, sparse_learning_rate, 0.05, "Learning rate of the rows.");
ABSL_FLAG(double, sparse_initial_accumulator, 0.1,
          "Adagrad's starting squared-gradient sum per row value. Gradients "
          "are means over the global batch, so a row's are small: a smaller "
          "value lets rare rows move sooner.");
ABSL_FLAG(double, sparse_init_stddev, 0.01,
          "Rows start truncated-normal with this standard deviation.");
ABSL_FLAG(bool, wide, true,
          "Add a wide (first-order) term to the model, as Wide&Deep and "
          "DeepFM do: one weight per feature value, in the dim-1 PS table "
          "<--table>_wide (zeros at first, the sparse optimizer and the "
          "table's admission, eviction and budget), summed into the logit; "
          "--wide=false: the DLRM alone.");
ABSL_FLAG(double, wide_learning_rate, 0.5,
          "Learning rate of the wide weights; 0: --sparse_learning_rate.");
ABSL_FLAG(std::string, wide_optimizer, "",
          "Optimizer of the wide weights: sgd, adagrad, adam or ftrl; empty: "
          "--sparse_optimizer.");
ABSL_FLAG(double, wide_l2, 0,
          "L2 regularization of the wide weights (FTRL's l2; ignored by the "
          "other optimizers).");
ABSL_FLAG(int, staleness, 1,
          "0: synchronous pulls and pushes; k >= 1: the next k batches are "
          "pulled during a step and k pushes may be in flight.");
ABSL_FLAG(int64_t, eval_every_steps, 0,
          "Evaluate every this many steps (and at the end); 0: at the end.");
ABSL_FLAG(double, progress_interval_s, 10,
          "Seconds between progress lines (rank 0).");
ABSL_FLAG(std::string, progress_file, "",
          "Rank 0 appends each progress report and evaluation to this CSV "
          "(step,epoch,examples,seconds,samples_per_second,loss,eval_auc,"
          "eval_log_loss; `stratactl plot` draws it); empty: none.");
ABSL_FLAG(std::string, tensorboard_dir, "",
          "Rank 0 writes each progress report's loss, samples/s and "
          "evaluation as TensorBoard scalars to an event file in this folder "
          "(`tensorboard --logdir` draws them); empty: none.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Where rank 0 writes dense checkpoints, each taken with a PS "
          "checkpoint at the same step; empty: no checkpoints.");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "Checkpoint every this many steps (and at the end).");
ABSL_FLAG(int64_t, full_checkpoint_every, 1,
          "Every this many checkpoints is a full PS checkpoint, the others "
          "incremental (only the rows changed since the previous one); 1: "
          "all full.");
ABSL_FLAG(bool, restore, false,
          "Resume from the latest checkpoint in --checkpoint_dir (PS shards "
          "are restored to it).");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda.");
ABSL_FLAG(int, cuda_device, 0, "GPU of this rank with --device=cuda.");
ABSL_FLAG(double, ps_rpc_timeout_s, 10, "Deadline of each PS call.");
ABSL_FLAG(double, ps_retry_deadline_s, 60,
          "How long an unavailable shard is retried before the worker stops "
          "with an error.");
ABSL_FLAG(bool, pull_fp16, false,
          "Pulled rows travel as fp16 (IEEE binary16: half the bytes, values "
          "rounded to 11 significant bits) through a PS client of their own; "
          "pushes stay float32, since gradients scaled by 1/batch would fall "
          "in fp16's subnormal range.");
ABSL_FLAG(bool, shared_memory_pull, true,
          "Rows pulled from a shard on this machine (a loopback address) are "
          "answered in shared memory, not in the gRPC message: one copy and "
          "no gRPC framing of the rows. Shards elsewhere answer over gRPC "
          "either way.");
ABSL_FLAG(double, collective_timeout_s, 300,
          "How long to wait for the other ranks (joining, each allreduce).");
ABSL_FLAG(int, metrics_port, -1,
          "Serve /healthz and Prometheus /metrics (steps, examples, loss, "
          "samples/s, eval AUC) over HTTP on --host at this port; 0 picks a "
          "free one (logged as metrics_port=N); -1: off.");
ABSL_FLAG(std::string, result_file, "", "Write the final result as JSON here.");

namespace strata {
namespace {

// About 4 GB of single-hot examples.
constexpr int64_t kMaxShuffleBuffer = 10'000'000;

absl::StatusOr<std::vector<int>> ParseWidths(const std::string& flag,
                                             const std::string& text) {
  std::vector<int> widths;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int width;
    if (!absl::SimpleAtoi(part, &width) || width < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", part, "\" is not a width >= 1"));
    }
    widths.push_back(width);
  }
  return widths;
}

std::vector<std::string> SplitList(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

// The optimizer `name` given to --`flag`, as a model config names it.
absl::StatusOr<v1::OptimizerType> ParseSparseOptimizer(
    absl::string_view flag, const std::string& name) {
  absl::StatusOr<v1::OptimizerType> type = ParseOptimizerType(name);
  if (!type.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", type.status().message()));
  }
  return type;
}

absl::Status ReadWideFlags(WorkerFlags* flags) {
  TrainerOptions& trainer = flags->trainer;
  const double rate = absl::GetFlag(FLAGS_wide_learning_rate);
  if (!(rate >= 0)) {
    return absl::InvalidArgumentError(
        "--wide_learning_rate must be >= 0 (0: --sparse_learning_rate)");
  }
  const double l2 = absl::GetFlag(FLAGS_wide_l2);
  if (!(l2 >= 0)) return absl::InvalidArgumentError("--wide_l2 must be >= 0");
  if (!absl::GetFlag(FLAGS_wide)) return absl::OkStatus();
  trainer.wide_table = absl::StrCat(trainer.table, "_wide");
  v1::TableConfig& wide = trainer.wide_table_config;
  wide = trainer.table_config;  // optimizer, seed and policies
  const std::string optimizer = absl::GetFlag(FLAGS_wide_optimizer);
  if (!optimizer.empty()) {
    auto type = ParseSparseOptimizer("wide_optimizer", optimizer);
    if (!type.ok()) return type.status();
    const float learning_rate = wide.optimizer().learning_rate();
    wide.mutable_optimizer()->Clear();
    wide.mutable_optimizer()->set_type(*type);
    wide.mutable_optimizer()->set_learning_rate(learning_rate);
  }
  if (wide.optimizer().type() == v1::FTRL) {
    wide.mutable_optimizer()->set_l2(static_cast<float>(l2));
  }
  if (rate > 0) {
    wide.mutable_optimizer()->set_learning_rate(static_cast<float>(rate));
  }
  wide.mutable_initializer()->Clear();
  wide.mutable_initializer()->set_type(v1::ZEROS);
  return absl::OkStatus();
}

absl::Status ReadModelFlags(WorkerFlags* flags) {
  ModelConfig& model = flags->trainer.model;
  model.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  model.seed = absl::GetFlag(FLAGS_seed);
  auto bottom = ParseWidths("bottom_mlp", absl::GetFlag(FLAGS_bottom_mlp));
  if (!bottom.ok()) return bottom.status();
  model.bottom_hidden = *bottom;
  auto top = ParseWidths("top_mlp", absl::GetFlag(FLAGS_top_mlp));
  if (!top.ok()) return top.status();
  model.top_hidden = *top;
  auto interaction = ParseInteraction(absl::GetFlag(FLAGS_interaction));
  if (!interaction.ok()) return interaction.status();
  model.interaction = *interaction;
  auto pooling = ParsePooling(absl::GetFlag(FLAGS_pooling));
  if (!pooling.ok()) return pooling.status();
  model.pooling = *pooling;
  if (absl::Status s = ValidateModelConfig(model); !s.ok()) return s;

  DenseOptimizerConfig& dense = flags->trainer.dense_optimizer;
  auto kind = ParseDenseOptimizerKind(absl::GetFlag(FLAGS_dense_optimizer));
  if (!kind.ok()) return kind.status();
  dense.kind = *kind;
  dense.learning_rate =
      static_cast<float>(absl::GetFlag(FLAGS_dense_learning_rate));
  if (!(dense.learning_rate > 0)) {
    return absl::InvalidArgumentError("--dense_learning_rate must be > 0");
  }
  auto schedule = ParseLearningRateSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_schedule: ", schedule.status().message()));
  }
  dense.schedule = *schedule;
  dense.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  if (dense.warmup_steps < 0) {
    return absl::InvalidArgumentError("--warmup_steps must be >= 0");
  }

  v1::TableConfig& table = flags->trainer.table_config;
  auto sparse = ParseSparseOptimizer("sparse_optimizer",
                                     absl::GetFlag(FLAGS_sparse_optimizer));
  if (!sparse.ok()) return sparse.status();
  table.mutable_optimizer()->set_type(*sparse);
  table.mutable_optimizer()->set_learning_rate(
      static_cast<float>(absl::GetFlag(FLAGS_sparse_learning_rate)));
  if (*sparse == v1::ADAGRAD) {
    table.mutable_optimizer()->set_initial_accumulator(
        static_cast<float>(absl::GetFlag(FLAGS_sparse_initial_accumulator)));
  }
  table.mutable_initializer()->set_type(v1::TRUNCATED_NORMAL);
  table.mutable_initializer()->set_stddev(
      static_cast<float>(absl::GetFlag(FLAGS_sparse_init_stddev)));
  table.set_seed(model.seed);
  // Admission, eviction and memory budget: the same flags as stratactl
  // create-table's, so that a table made by either has the same config and
  // the worker attaches to one made before it.
  SetTablePoliciesFromFlags(table);
  flags->trainer.table = absl::GetFlag(FLAGS_table);
  const std::string model_config = absl::GetFlag(FLAGS_model_config);
  if (!model_config.empty()) {
    // A table of the file that switches to Adagrad takes the flag's
    // initial accumulator too.
    v1::TableConfig defaults = table;
    defaults.mutable_optimizer()->set_initial_accumulator(
        static_cast<float>(absl::GetFlag(FLAGS_sparse_initial_accumulator)));
    auto tables =
        ReadFeatureTables(FileSystem::Default(), model_config, defaults,
                          model.embedding_dim, model.num_fields);
    if (!tables.ok()) return tables.status();
    flags->trainer.feature_tables = std::move(*tables);
  }
  return ReadWideFlags(flags);
}

absl::Status ReadTrainingFlags(WorkerFlags* flags) {
  TrainerOptions& t = flags->trainer;
  t.train.files = SplitList(absl::GetFlag(FLAGS_train_files));
  if (t.train.files.empty()) {
    return absl::InvalidArgumentError("--train_files is required");
  }
  t.eval_files = SplitList(absl::GetFlag(FLAGS_eval_files));
  t.train.strict = absl::GetFlag(FLAGS_strict);
  t.train.batch_size = absl::GetFlag(FLAGS_batch_size);
  if (t.train.batch_size < 1) {
    return absl::InvalidArgumentError("--batch_size must be >= 1");
  }
  t.epochs = absl::GetFlag(FLAGS_epochs);
  const int64_t shuffle = absl::GetFlag(FLAGS_shuffle_buffer);
  if (shuffle < 0 || shuffle > kMaxShuffleBuffer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shuffle_buffer=", shuffle, " is not in 0..", kMaxShuffleBuffer));
  }
  t.shuffle_window = static_cast<size_t>(shuffle);
  t.max_steps = absl::GetFlag(FLAGS_max_steps);
  t.staleness = absl::GetFlag(FLAGS_staleness);
  t.eval_every_steps = absl::GetFlag(FLAGS_eval_every_steps);
  t.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  t.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  t.full_checkpoint_every = absl::GetFlag(FLAGS_full_checkpoint_every);
  if (t.full_checkpoint_every < 1) {
    return absl::InvalidArgumentError("--full_checkpoint_every must be >= 1");
  }
  t.restore = absl::GetFlag(FLAGS_restore);
  const double progress = absl::GetFlag(FLAGS_progress_interval_s);
  if (t.epochs < 0 || t.max_steps < 0 || t.staleness < 0 ||
      t.eval_every_steps < 0 || t.checkpoint_every_steps < 0 ||
      !(progress > 0)) {
    return absl::InvalidArgumentError(
        "--progress_interval_s must be > 0 and --epochs, --max_steps, "
        "--staleness, --eval_every_steps, --checkpoint_every_steps >= 0");
  }
  if (t.restore && t.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--restore needs --checkpoint_dir");
  }
  t.progress_interval = absl::Seconds(progress);
  t.progress_file = absl::GetFlag(FLAGS_progress_file);
  t.tensorboard_dir = absl::GetFlag(FLAGS_tensorboard_dir);
  return absl::OkStatus();
}

absl::Duration PositiveSeconds(double seconds) {
  return seconds > 0 ? absl::Seconds(seconds) : absl::ZeroDuration();
}

}  // namespace

absl::StatusOr<WorkerFlags> WorkerFlagsFromCommandLine() {
  WorkerFlags flags;
  flags.shards = SplitList(absl::GetFlag(FLAGS_shards));
  if (flags.shards.empty()) {
    return absl::InvalidArgumentError("--shards is required");
  }
  flags.rank = absl::GetFlag(FLAGS_rank);
  flags.num_workers = absl::GetFlag(FLAGS_num_workers);
  if (flags.num_workers < 1 || flags.rank < 0 ||
      flags.rank >= flags.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank=", flags.rank, " is not in 0..--num_workers-1 (",
                     flags.num_workers, " workers)"));
  }
  flags.rendezvous = absl::GetFlag(FLAGS_rendezvous);
  // A replicated first shard: its first replica (every replica serves the
  // rendezvous, which only lasts while the ranks meet).
  if (flags.rendezvous.empty()) {
    flags.rendezvous = flags.shards[0].substr(0, flags.shards[0].find('|'));
  }
  flags.job_id = absl::GetFlag(FLAGS_job_id);
  if (flags.job_id.empty()) {
    return absl::InvalidArgumentError("--job_id must not be empty");
  }
  flags.host = absl::GetFlag(FLAGS_host);
  flags.device = absl::GetFlag(FLAGS_device);
  if (flags.device != "cpu" && flags.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", flags.device, ": want cpu or cuda"));
  }
  flags.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  flags.ps_rpc_timeout = PositiveSeconds(absl::GetFlag(FLAGS_ps_rpc_timeout_s));
  flags.ps_retry_deadline =
      PositiveSeconds(absl::GetFlag(FLAGS_ps_retry_deadline_s));
  flags.collective_timeout =
      PositiveSeconds(absl::GetFlag(FLAGS_collective_timeout_s));
  flags.pull_fp16 = absl::GetFlag(FLAGS_pull_fp16);
  flags.shared_memory_pull = absl::GetFlag(FLAGS_shared_memory_pull);
  if (flags.ps_rpc_timeout == absl::ZeroDuration() ||
      flags.collective_timeout == absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--ps_rpc_timeout_s and --collective_timeout_s must be > 0");
  }
  flags.result_file = absl::GetFlag(FLAGS_result_file);
  flags.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (flags.metrics_port < -1 || flags.metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port=", flags.metrics_port, " is not -1 or 0..65535"));
  }
  if (absl::Status s = ReadModelFlags(&flags); !s.ok()) return s;
  if (absl::Status s = ReadTrainingFlags(&flags); !s.ok()) return s;
  return flags;
}

absl::StatusOr<std::unique_ptr<Collective>> CreateDeviceCollective(
    const WorkerFlags& flags, RendezvousClient* rendezvous) {
#ifdef STRATA_WITH_CUDA
  NcclCollectiveOptions options;
  options.rank = flags.rank;
  options.world_size = flags.num_workers;
  options.device = flags.cuda_device;
  options.rendezvous = rendezvous;
  options.job_id = flags.job_id;
  options.timeout = flags.collective_timeout;
  return CreateNcclCollective(options);
#else
  (void)flags;
  (void)rendezvous;
  return absl::FailedPreconditionError(
      "--device=cuda: this build has no CUDA support");
#endif
}

absl::Status WriteResultFile(const std::string& path,
                             const TrainingResult& result) {
  std::string json = absl::StrFormat(
      "{\"steps\": %d, \"examples\": %d, \"seconds\": %.3f, "
      "\"samples_per_second\": %.1f, \"cpu_seconds\": %.3f, "
      "\"final_loss\": %.6f, "
      "\"eval_examples\": %d, \"eval_auc\": %.6f, \"eval_log_loss\": %.6f, "
      "\"malformed_lines\": %d}\n",
      result.steps, result.examples, result.seconds, result.samples_per_second,
      result.cpu_seconds, result.final_loss, result.eval.examples,
      result.eval.auc, result.eval.log_loss, result.malformed_lines);
  return FileSystem::Default()->WriteFileAtomically(path, json);
}

}  // namespace strata
