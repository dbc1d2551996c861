#include "worker/training/trainer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ps_client.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "proto/strata.pb.h"
#include "worker/async_pusher.h"
#include "worker/collective/collective.h"
#include "worker/data/metrics.h"
#include "worker/training/batch_pipeline.h"
#include "worker/training/dense_checkpoint.h"
#include "worker/training/training_metrics.h"

namespace strata {
namespace {

// Integers travel through float collectives as their bit patterns
// (Broadcast copies bytes; it never adds them).
constexpr size_t kFloatsPerInt = sizeof(int64_t) / sizeof(float);

void PutInt(int64_t value, float* out) {
  std::memcpy(out, &value, sizeof(value));
}

int64_t GetInt(const float* in) {
  int64_t value;
  std::memcpy(&value, in, sizeof(value));
  return value;
}

// Fills in options.feature_tables with one table of every field when it is
// empty, and checks that every field is in exactly one table of the model's
// dimension, under a name of its own.
absl::Status FillInAndCheckFeatureTables(TrainerOptions& options) {
  const int num_fields = options.model.num_fields;
  if (options.feature_tables.empty()) {
    FeatureTable all;
    all.name = options.table;
    all.config = options.table_config;
    all.config.set_dim(static_cast<uint32_t>(options.model.embedding_dim));
    for (int f = 0; f < num_fields; ++f) all.fields.push_back(f);
    options.feature_tables.push_back(std::move(all));
  }
  std::vector<int> tables_of_field(num_fields, 0);
  absl::flat_hash_set<std::string> names;
  for (FeatureTable& table : options.feature_tables) {
    if (!names.insert(table.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two feature tables are named \"", table.name, "\""));
    }
    table.config.set_name(table.name);
    const int model_dim = options.model.embedding_dim;
    if (table.config.dim() == 0) {
      table.config.set_dim(static_cast<uint32_t>(model_dim));
    }
    if (table.config.dim() > static_cast<uint32_t>(model_dim)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feature table \"", table.name, "\" has dim ", table.config.dim(),
          ", above the model's embedding_dim ", model_dim));
    }
    if (table.name.empty() || table.name == options.wide_table) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature table name \"", table.name,
                       "\" is empty or the wide term's table"));
    }
    for (int f : table.fields) {
      if (f < 0 || f >= num_fields) {
        return absl::InvalidArgumentError(
            absl::StrCat("feature table \"", table.name, "\" names field ", f,
                         " of a model with ", num_fields));
      }
      ++tables_of_field[f];
    }
  }
  for (int f = 0; f < num_fields; ++f) {
    if (tables_of_field[f] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("field C", f + 1, " is in ", tables_of_field[f],
                       " feature tables; it must be in one"));
    }
  }
  return absl::OkStatus();
}

// What a checkpoint must match: the model's shape, and with several
// tables, or a narrower one, which fields each holds and at what width (a
// checkpoint of another grouping would train on against tables its rows are
// not in).
std::string DescribeModelAndTables(const TrainerOptions& options) {
  std::string description = DescribeModel(options.model);
  const uint32_t model_dim = options.model.embedding_dim;
  const bool narrower =
      absl::c_any_of(options.feature_tables, [&](const FeatureTable& table) {
        return table.config.dim() < model_dim;
      });
  if (options.feature_tables.size() < 2 && !narrower) return description;
  absl::StrAppend(&description, "; tables");
  for (const FeatureTable& table : options.feature_tables) {
    absl::StrAppend(
        &description, " ", table.name, "=C",
        absl::StrJoin(table.fields, ",C", [](std::string* out, int field) {
          absl::StrAppend(out, field + 1);
        }));
    if (table.config.dim() < model_dim) {
      absl::StrAppend(&description, " (dim ", table.config.dim(), ")");
    }
  }
  return description;
}

FieldTables FieldTablesOf(const TrainerOptions& options) {
  FieldTables tables;
  tables.table_of_field.resize(options.model.num_fields);
  for (const FeatureTable& table : options.feature_tables) {
    for (int f : table.fields) {
      tables.table_of_field[f] = static_cast<int>(tables.names.size());
    }
    tables.names.push_back(table.name);
    tables.dims.push_back(static_cast<int>(table.config.dim()));
  }
  return tables;
}

}  // namespace

int AutoEpochsForRows(int64_t rows) {
  if (rows <= 0) return 1;
  const int64_t epochs = (kAutoEpochExamples + rows - 1) / rows;
  return static_cast<int>(std::clamp<int64_t>(epochs, 1, kMaxAutoEpochs));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    TrainerOptions options, PsClient* ps, Collective* collective,
    std::unique_ptr<DenseModel> model) {
  if (ps == nullptr || collective == nullptr || model == nullptr) {
    return absl::InvalidArgumentError(
        "trainer needs a PS, a collective and a "
        "model");
  }
  if (options.epochs == 0) {
    // Every rank counts the same lines, so all choose the same.
    STRATA_ASSIGN_OR_RETURN(int64_t rows, CountCriteoLines(options.train.files,
                                                           kAutoEpochExamples));
    options.epochs = AutoEpochsForRows(rows);
    STRATA_LOG(INFO, "worker")
        << (rows >= kAutoEpochExamples ? "at least " : "") << rows
        << " training rows: " << options.epochs << " epoch(s)";
  }
  if (options.epochs < 1 || options.staleness < 0 || options.max_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epochs (", options.epochs, ") must be >= 1, staleness (",
        options.staleness, ") and max_steps (", options.max_steps, ") >= 0"));
  }
  if (options.restore && options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("restore needs a checkpoint directory");
  }
  STRATA_RETURN_IF_ERROR(FillInAndCheckFeatureTables(options));
  options.train.rank = collective->rank();
  options.train.world_size = collective->world_size();
  auto optimizer = DenseOptimizer::Create(options.dense_optimizer,
                                          model->layout().num_parameters);
  if (!optimizer.ok()) return optimizer.status();
  return std::unique_ptr<Trainer>(new Trainer(std::move(options), ps,
                                              collective, std::move(model),
                                              std::move(*optimizer)));
}

Trainer::Trainer(TrainerOptions options, PsClient* ps, Collective* collective,
                 std::unique_ptr<DenseModel> model,
                 std::unique_ptr<DenseOptimizer> optimizer)
    : options_(std::move(options)),
      ps_(ps),
      collective_(collective),
      model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      fs_(options_.fs != nullptr ? options_.fs : FileSystem::Default()),
      field_tables_(FieldTablesOf(options_)),
      parameters_(InitialDenseParameters(options_.model)) {}

Trainer::~Trainer() = default;

absl::Status Trainer::Setup() {
  if (collective_->rank() == 0) {
    for (const FeatureTable& table : options_.feature_tables) {
      STRATA_RETURN_IF_ERROR(ps_->CreateTable(table.config));
    }
    if (!options_.wide_table.empty()) {
      v1::TableConfig wide = options_.wide_table_config;
      wide.set_name(options_.wide_table);
      wide.set_dim(1);
      if (absl::Status s = ps_->CreateTable(wide); !s.ok()) return s;
    }
    if (options_.restore) {
      if (absl::Status s = RestoreFromCheckpoint(); !s.ok()) return s;
    }
  }
  // Everyone starts from rank 0's state (and after rank 0 made the table).
  return SyncStateFromRankZero();
}

absl::Status Trainer::RestoreFromCheckpoint() {
  auto checkpoint = ReadLatestDenseCheckpoint(fs_, options_.checkpoint_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  const std::string description = DescribeModelAndTables(options_);
  if (checkpoint->model_description != description) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint is of another model (", checkpoint->model_description,
        "); this run has ", description));
  }
  if (absl::Status s = optimizer_->RestoreState(checkpoint->optimizer_state);
      !s.ok()) {
    return s;
  }
  auto restored = ps_->Restore(checkpoint->ps_checkpoint_id);
  if (!restored.ok()) return restored.status();
  parameters_ = std::move(checkpoint->parameters);
  step_ = checkpoint->global_step;
  epoch_ = checkpoint->epoch;
  batches_in_epoch_ = checkpoint->batches_in_epoch;
  STRATA_LOG(INFO, "worker")
      << "restored step " << step_ << " (epoch " << epoch_ << ", PS checkpoint "
      << checkpoint->ps_checkpoint_id << ")";
  return absl::OkStatus();
}

absl::Status Trainer::SyncStateFromRankZero() {
  std::string state = optimizer_->SerializeState();
  std::vector<float> buffer(3 * kFloatsPerInt + parameters_.size() +
                            (state.size() + sizeof(float) - 1) / sizeof(float));
  float* out = buffer.data();
  PutInt(step_, out);
  PutInt(epoch_, out + kFloatsPerInt);
  PutInt(batches_in_epoch_, out + 2 * kFloatsPerInt);
  out += 3 * kFloatsPerInt;
  std::copy(parameters_.begin(), parameters_.end(), out);
  std::memcpy(out + parameters_.size(), state.data(), state.size());
  if (absl::Status s = collective_->Broadcast(absl::MakeSpan(buffer), 0);
      !s.ok()) {
    return s;
  }
  step_ = GetInt(buffer.data());
  epoch_ = static_cast<int>(GetInt(buffer.data() + kFloatsPerInt));
  batches_in_epoch_ = GetInt(buffer.data() + 2 * kFloatsPerInt);
  const float* in = buffer.data() + 3 * kFloatsPerInt;
  std::copy(in, in + parameters_.size(), parameters_.begin());
  std::memcpy(state.data(), in + parameters_.size(), state.size());
  if (absl::Status s = optimizer_->RestoreState(state); !s.ok()) return s;
  return model_->SetParameters(parameters_);
}

absl::StatusOr<TrainingResult> Trainer::Run() {
  if (absl::Status s = Setup(); !s.ok()) return s;
  if (!options_.progress_file.empty() && collective_->rank() == 0) {
    auto csv = ProgressCsv::Open(options_.progress_file);
    if (!csv.ok()) return csv.status();
    progress_csv_ = *std::move(csv);
  }
  if (!options_.tensorboard_dir.empty() && collective_->rank() == 0) {
    auto events = TensorBoardEvents::Open(
        options_.tensorboard_dir,
        absl::ToDoubleSeconds(options_.clock->Now() - absl::UnixEpoch()));
    if (!events.ok()) return events.status();
    tensorboard_ = *std::move(events);
  }
  BatchPipelineOptions pipeline_options;
  pipeline_options.reader = options_.train;
  pipeline_options.epochs = options_.epochs - epoch_;
  pipeline_options.skip_batches = batches_in_epoch_;
  pipeline_options.depth = options_.staleness;
  pipeline_options.shuffle_window = options_.shuffle_window;
  pipeline_options.shuffle_seed = options_.model.seed;
  pipeline_options.first_epoch = epoch_;
  pipeline_options.tables = field_tables_;
  pipeline_options.embedding_dim = options_.model.embedding_dim;
  pipeline_options.wide_table = options_.wide_table;
  pipeline_options.ps = pull_ps();
  if (pipeline_options.epochs < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint has finished ", epoch_,
                     " epochs; nothing left of ", options_.epochs));
  }
  auto pipeline = BatchPipeline::Start(pipeline_options);
  if (!pipeline.ok()) return pipeline.status();
  pushers_.clear();
  // Every push is of a batch's unique keys (per table), already distinct.
  for (const std::string& table : field_tables_.names) {
    pushers_.push_back(std::make_unique<AsyncPusher>(
        ps_, table, std::max(1, options_.staleness), /*distinct_keys=*/true));
  }
  if (!options_.wide_table.empty()) {
    wide_pusher_ = std::make_unique<AsyncPusher>(
        ps_, options_.wide_table, std::max(1, options_.staleness),
        /*distinct_keys=*/true);
  }
  current_epoch_ = epoch_;

  const size_t n = parameters_.size();
  const int dim = options_.model.embedding_dim;
  std::vector<float> reduce(n + 2);
  std::vector<float> row_gradients, probabilities;
  const absl::Time start = options_.clock->Now();
  const double cpu_start = ProcessCpuSeconds();
  interval_start_ = start;
  run_start_ = start;
  int last_epoch = 0;
  bool data_exhausted = false;
  while (options_.max_steps == 0 || step_ < options_.max_steps) {
    auto batch = (*pipeline)->Next();
    if (!batch.ok()) return batch.status();
    PreparedBatch* b = batch->get();
    std::fill(reduce.begin(), reduce.end(), 0.0f);
    if (b != nullptr) {
      if (b->epoch != last_epoch) {
        last_epoch = b->epoch;
        batches_in_epoch_ = 0;
      }
      row_gradients.resize(b->unique_keys.size() * dim);
      probabilities.resize(b->examples.size());
      auto loss = model_->ForwardBackward(
          b->View(), absl::MakeSpan(reduce.data(), n),
          absl::MakeSpan(row_gradients), absl::MakeSpan(probabilities));
      if (!loss.ok()) return loss.status();
      reduce[n] = static_cast<float>(b->examples.size());
      reduce[n + 1] = static_cast<float>(*loss);
    }
    if (absl::Status s = collective_->AllreduceSum(absl::MakeSpan(reduce));
        !s.ok()) {
      return s;
    }
    const double global_examples = reduce[n];
    if (global_examples == 0) {  // every rank is out of data
      data_exhausted = true;
      break;
    }
    const float scale = static_cast<float>(1.0 / global_examples);
    for (size_t i = 0; i < n; ++i) reduce[i] *= scale;
    if (absl::Status s = optimizer_->Apply(absl::MakeSpan(reduce.data(), n),
                                           absl::MakeSpan(parameters_));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = model_->SetParameters(parameters_); !s.ok()) return s;
    if (b != nullptr) {
      for (float& g : row_gradients) g *= scale;
      if (wide_pusher_ != nullptr) {
        if (absl::Status s = wide_pusher_->Push(
                b->unique_keys, WideGradients(*b, probabilities, scale),
                static_cast<uint64_t>(step_) + 1);
            !s.ok()) {
          return s;
        }
      }
      STRATA_RETURN_IF_ERROR(PushRows(*b, std::move(row_gradients),
                                      static_cast<uint64_t>(step_) + 1));
      ++batches_in_epoch_;
      current_epoch_ = epoch_ + b->epoch;
    }
    if (options_.staleness == 0) {
      // Synchronous: every rank's pushes land before anyone pulls again.
      if (absl::Status s = DrainPushes(); !s.ok()) return s;
      if (absl::Status s = collective_->Barrier(); !s.ok()) return s;
    }
    ++step_;
    interval_examples_ += static_cast<int64_t>(global_examples);
    interval_loss_ += reduce[n + 1];
    if (options_.on_step) options_.on_step(step_, parameters_);
    if (options_.metrics != nullptr) {
      options_.metrics->RecordStep(
          step_, b != nullptr ? static_cast<int64_t>(b->examples.size()) : 0,
          static_cast<int64_t>(global_examples));
      options_.metrics->RecordPushedKeys(PushedKeys());
      options_.metrics->RecordMalformedLines((*pipeline)->malformed_lines());
    }

    const EvalResult* eval = nullptr;
    EvalResult eval_result;
    if (options_.eval_every_steps > 0 &&
        step_ % options_.eval_every_steps == 0 &&
        !options_.eval_files.empty()) {
      auto evaluated = Evaluate();
      if (!evaluated.ok()) return evaluated.status();
      eval_result = *evaluated;
      eval = &eval_result;
    }
    if (options_.checkpoint_every_steps > 0 &&
        step_ % options_.checkpoint_every_steps == 0 &&
        !options_.checkpoint_dir.empty()) {
      if (absl::Status s = Checkpoint(); !s.ok()) return s;
    }
    if (eval != nullptr ||
        options_.clock->Now() - interval_start_ >= options_.progress_interval) {
      ReportProgress(eval);
    }
  }
  if (absl::Status s = DrainPushes(); !s.ok()) return s;
  if (absl::Status s = collective_->Barrier(); !s.ok()) return s;

  TrainingResult result;
  result.seconds = absl::ToDoubleSeconds(options_.clock->Now() - start);
  result.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  if (!options_.eval_files.empty()) {
    // A large held-out set takes a while; the line also marks where the
    // training's CPU time ends for whoever measures it from outside.
    STRATA_LOG(INFO, "worker")
        << "training done at step " << step_ << "; evaluating";
    auto evaluated = Evaluate();
    if (!evaluated.ok()) return evaluated.status();
    result.eval = *evaluated;
  }
  ReportProgress(result.eval.examples > 0 ? &result.eval : nullptr);
  if (!options_.checkpoint_dir.empty()) {
    if (data_exhausted) {
      // Every epoch is done: a restore with more --epochs starts the next.
      current_epoch_ = options_.epochs;
      batches_in_epoch_ = 0;
    }
    if (absl::Status s = Checkpoint(); !s.ok()) return s;
  }
  result.steps = step_;
  result.examples = run_examples_;
  result.samples_per_second =
      result.seconds > 0 ? run_examples_ / result.seconds : 0;
  result.final_loss = last_loss_;
  result.malformed_lines = (*pipeline)->malformed_lines();
  return result;
}

void Trainer::WriteTensorBoard(const ProgressReport& report) {
  std::vector<std::pair<std::string, float>> scalars = {
      {"loss", static_cast<float>(report.loss)},
      {"samples_per_second", static_cast<float>(report.samples_per_second)}};
  if (report.eval != nullptr) {
    scalars.emplace_back("eval_auc", static_cast<float>(report.eval->auc));
    scalars.emplace_back("eval_log_loss",
                         static_cast<float>(report.eval->log_loss));
  }
  absl::Status written = tensorboard_->AddScalars(
      report.step,
      absl::ToDoubleSeconds(options_.clock->Now() - absl::UnixEpoch()),
      scalars);
  if (!written.ok()) {
    // Training goes on without the pictures.
    STRATA_LOG(WARNING, "worker")
        << written.message() << "; no more TensorBoard events";
    tensorboard_.reset();
  }
}

void Trainer::ReportProgress(const EvalResult* eval) {
  const absl::Time now = options_.clock->Now();
  const double seconds = absl::ToDoubleSeconds(now - interval_start_);
  ProgressReport report;
  report.step = step_;
  report.epoch = current_epoch_;
  run_examples_ += interval_examples_;
  report.examples = run_examples_;
  report.samples_per_second = seconds > 0 ? interval_examples_ / seconds : 0;
  if (interval_examples_ > 0) last_loss_ = interval_loss_ / interval_examples_;
  report.loss = last_loss_;
  report.eval = eval;
  interval_start_ = now;
  interval_examples_ = 0;
  interval_loss_ = 0;
  if (options_.metrics != nullptr) {
    options_.metrics->RecordProgress(report.loss, report.samples_per_second);
    if (eval != nullptr) {
      options_.metrics->RecordEval(eval->auc, eval->log_loss);
    }
  }
  if (progress_csv_ != nullptr) {
    progress_csv_->Append(report.step, report.epoch, report.examples,
                          absl::ToDoubleSeconds(now - run_start_),
                          report.samples_per_second, report.loss,
                          eval != nullptr, eval ? eval->auc : 0,
                          eval ? eval->log_loss : 0);
  }
  if (tensorboard_ != nullptr) WriteTensorBoard(report);
  if (options_.on_progress) {
    options_.on_progress(report);
    return;
  }
  if (collective_->rank() != 0) return;
  std::string line = absl::StrFormat(
      "step %d epoch %d examples %d samples/s %.0f loss %.5f", report.step,
      report.epoch, report.examples, report.samples_per_second, report.loss);
  if (eval != nullptr) {
    absl::StrAppendFormat(&line, " eval_auc %.5f eval_logloss %.5f", eval->auc,
                          eval->log_loss);
  }
  STRATA_LOG(INFO, "worker") << line;
}

absl::Status Trainer::TakePsCheckpoint(std::string& id) {
  const bool incremental =
      checkpoints_taken_ % options_.full_checkpoint_every != 0;
  auto taken = ps_->Checkpoint(id, step_, incremental);
  if (incremental &&
      taken.status().code() == absl::StatusCode::kFailedPrecondition) {
    // A shard restarted since the last checkpoint and no longer knows what
    // changed: take a full one (under another id: other shards may hold a
    // delta under the first).
    STRATA_LOG(WARNING, "worker")
        << "incremental checkpoint refused (" << taken.status().message()
        << "); taking a full one";
    id += "-full";
    taken = ps_->Checkpoint(id, step_, /*incremental=*/false);
  }
  if (taken.ok()) ++checkpoints_taken_;
  return taken.status();
}

absl::Status Trainer::PushRows(PreparedBatch& batch,
                               std::vector<float> row_gradients,
                               uint64_t step) {
  const int dim = options_.model.embedding_dim;
  const std::vector<int> widths = field_tables_.WidthsFor(dim);
  if (pushers_.size() == 1 && widths[0] == dim) {
    return pushers_[0]->Push(std::move(batch.unique_keys),
                             std::move(row_gradients), step);
  }
  std::vector<TableRows> by_table =
      SplitRowsByTable(batch, row_gradients, dim, widths);
  for (size_t t = 0; t < by_table.size(); ++t) {
    if (by_table[t].keys.empty()) continue;
    STRATA_RETURN_IF_ERROR(pushers_[t]->Push(
        std::move(by_table[t].keys), std::move(by_table[t].values), step));
  }
  return absl::OkStatus();
}

int64_t Trainer::PushedKeys() const {
  int64_t keys = 0;
  for (const auto& pusher : pushers_) keys += pusher->pushed_keys();
  return keys;
}

absl::Status Trainer::DrainPushes() {
  for (const auto& pusher : pushers_) STRATA_RETURN_IF_ERROR(pusher->Drain());
  if (wide_pusher_ == nullptr) return absl::OkStatus();
  return wide_pusher_->Drain();
}

absl::Status Trainer::Checkpoint() {
  // Every rank's pushes of every step so far are in before the PS snapshot.
  if (absl::Status s = DrainPushes(); !s.ok()) return s;
  if (absl::Status s = collective_->Barrier(); !s.ok()) return s;
  absl::Status status;
  if (collective_->rank() == 0) {
    DenseCheckpoint checkpoint;
    checkpoint.global_step = step_;
    checkpoint.epoch = current_epoch_;
    checkpoint.batches_in_epoch = batches_in_epoch_;
    checkpoint.ps_checkpoint_id = absl::StrCat(
        "step-", step_, "-", absl::ToUnixMillis(options_.clock->Now()));
    checkpoint.model_description = DescribeModelAndTables(options_);
    checkpoint.parameters = parameters_;
    checkpoint.optimizer_state = optimizer_->SerializeState();
    status = TakePsCheckpoint(checkpoint.ps_checkpoint_id);
    if (status.ok()) {
      status = WriteDenseCheckpoint(fs_, options_.checkpoint_dir, checkpoint);
    }
    if (status.ok()) {
      STRATA_LOG(INFO, "worker") << "checkpoint at step " << step_ << ": "
                                 << checkpoint.ps_checkpoint_id;
    }
  }
  // Rank 0's outcome reaches everyone, so all ranks stop or go on together.
  std::vector<float> failed = {status.ok() ? 0.0f : 1.0f};
  if (absl::Status s = collective_->AllreduceSum(absl::MakeSpan(failed));
      !s.ok()) {
    return s;
  }
  if (!status.ok()) return status;
  if (failed[0] != 0) {
    return absl::AbortedError("rank 0 failed to write the checkpoint");
  }
  return absl::OkStatus();
}

}  // namespace strata
