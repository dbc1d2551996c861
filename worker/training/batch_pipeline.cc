#include "worker/training/batch_pipeline.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "common/status_macros.h"
#include "worker/data/criteo_format.h"

namespace strata {

ModelBatch PreparedBatch::View() const {
  ModelBatch view;
  view.batch_size = static_cast<int>(examples.size());
  view.dense = examples.dense;
  view.labels = examples.labels;
  view.offsets = offsets;
  view.rows = rows;
  view.embeddings = embeddings;
  view.num_rows = static_cast<int>(unique_keys.size());
  view.logit_offsets = wide_logits;
  return view;
}

namespace {

// Fills unique_keys, offsets and rows of `batch` from its examples' keys.
void IndexKeys(KeyIndex& index, PreparedBatch* batch) {
  batch->rows.resize(batch->examples.keys.size());
  index.Index(batch->examples.keys, &batch->unique_keys,
              absl::MakeSpan(batch->rows));
  // Key k is key k of the batch: the model's (example, field) slots are the
  // batch's own.
  batch->offsets = batch->examples.field_offsets;
  if (batch->offsets.empty()) batch->offsets.push_back(0);
}

// Fills key_tables of an indexed `batch` from its fields' tables.
// INVALID_ARGUMENT when the batch's fields are not those `tables` maps.
absl::Status SetKeyTables(const FieldTables& tables, PreparedBatch* batch) {
  batch->key_tables.clear();
  if (tables.names.size() < 2 || tables.table_of_field.empty()) {
    return absl::OkStatus();
  }
  batch->key_tables.assign(batch->unique_keys.size(), 0);
  const size_t examples = batch->examples.size();
  if (examples == 0) return absl::OkStatus();
  const size_t fields = tables.table_of_field.size();
  if (batch->offsets.size() != examples * fields + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a batch of ", examples, " examples has ", batch->offsets.size() - 1,
        " field slots; the tables map ", fields, " fields per example"));
  }
  for (size_t slot = 0; slot < examples * fields; ++slot) {
    const int table = tables.table_of_field[slot % fields];
    for (uint32_t k = batch->offsets[slot]; k < batch->offsets[slot + 1]; ++k) {
      batch->key_tables[batch->rows[k]] = table;
    }
  }
  return absl::OkStatus();
}

// Pulls each unique key's row from its table into batch->embeddings (a
// narrower table's rows padded with zeros to `dim`).
absl::Status PullRows(PsClient& ps, const FieldTables& tables, int dim,
                      PreparedBatch* batch) {
  const std::vector<int> widths = tables.WidthsFor(dim);
  if (batch->key_tables.empty() && widths[0] == dim) {
    batch->embeddings.resize(batch->unique_keys.size() * dim);
    return ps.PullDistinct(tables.names[0], batch->unique_keys,
                           absl::MakeSpan(batch->embeddings));
  }
  std::vector<TableRows> by_table = SplitRowsByTable(*batch, {}, dim, widths);
  for (size_t t = 0; t < by_table.size(); ++t) {
    TableRows& rows = by_table[t];
    if (rows.keys.empty()) continue;
    rows.values.resize(rows.keys.size() * widths[t]);
    STRATA_RETURN_IF_ERROR(ps.PullDistinct(tables.names[t], rows.keys,
                                           absl::MakeSpan(rows.values)));
  }
  // Back in unique-key order: each table's keys are in that order too.
  batch->embeddings.assign(batch->unique_keys.size() * dim, 0.0f);
  std::vector<size_t> next(by_table.size(), 0);
  for (size_t k = 0; k < batch->unique_keys.size(); ++k) {
    const int t = batch->key_tables.empty() ? 0 : batch->key_tables[k];
    std::copy_n(by_table[t].values.data() + next[t]++ * widths[t], widths[t],
                batch->embeddings.data() + k * dim);
  }
  return absl::OkStatus();
}

// Calls visit(example, row) for every key occurrence of `batch`.
template <typename Visit>
void ForEachKeyOfExample(const PreparedBatch& batch, Visit visit) {
  const size_t examples = batch.examples.size();
  if (examples == 0) return;
  const size_t fields = (batch.offsets.size() - 1) / examples;
  for (size_t i = 0; i < examples; ++i) {
    for (uint32_t k = batch.offsets[i * fields];
         k < batch.offsets[(i + 1) * fields]; ++k) {
      visit(i, batch.rows[k]);
    }
  }
}

absl::Status PullWideTerm(PsClient& ps, const std::string& wide_table,
                          PreparedBatch* batch) {
  std::vector<float> weights(batch->unique_keys.size());
  if (absl::Status s = ps.PullDistinct(wide_table, batch->unique_keys,
                                       absl::MakeSpan(weights));
      !s.ok()) {
    return s;
  }
  batch->wide_logits.assign(batch->examples.size(), 0.0f);
  ForEachKeyOfExample(*batch, [&](size_t example, uint32_t row) {
    batch->wide_logits[example] += weights[row];
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status IndexAndPull(PsClient& ps, const FieldTables& tables,
                          int embedding_dim, const std::string& wide_table,
                          KeyIndex* key_index, PreparedBatch* batch) {
  IndexKeys(*key_index, batch);
  STRATA_RETURN_IF_ERROR(SetKeyTables(tables, batch));
  STRATA_RETURN_IF_ERROR(PullRows(ps, tables, embedding_dim, batch));
  if (wide_table.empty()) return absl::OkStatus();
  return PullWideTerm(ps, wide_table, batch);
}

std::vector<TableRows> SplitRowsByTable(const PreparedBatch& batch,
                                        absl::Span<const float> values, int dim,
                                        absl::Span<const int> table_widths) {
  std::vector<TableRows> by_table(table_widths.size());
  for (size_t k = 0; k < batch.unique_keys.size(); ++k) {
    const int t = batch.key_tables.empty() ? 0 : batch.key_tables[k];
    TableRows& rows = by_table[t];
    rows.keys.push_back(batch.unique_keys[k]);
    if (!values.empty()) {
      const auto row = values.begin() + k * dim;
      rows.values.insert(rows.values.end(), row, row + table_widths[t]);
    }
  }
  return by_table;
}

std::vector<int> FieldTables::WidthsFor(int embedding_dim) const {
  if (dims.empty()) return std::vector<int>(names.size(), embedding_dim);
  return dims;
}

std::vector<float> WideGradients(const PreparedBatch& batch,
                                 absl::Span<const float> probabilities,
                                 float scale) {
  std::vector<float> gradients(batch.unique_keys.size(), 0.0f);
  ForEachKeyOfExample(batch, [&](size_t example, uint32_t row) {
    gradients[row] +=
        scale * (probabilities[example] - batch.examples.labels[example]);
  });
  return gradients;
}

absl::StatusOr<std::unique_ptr<BatchPipeline>> BatchPipeline::Start(
    BatchPipelineOptions options) {
  if (options.ps == nullptr || options.tables.names.empty() ||
      options.epochs < 1 || options.depth < 0 || options.embedding_dim < 1) {
    return absl::InvalidArgumentError(
        "batch pipeline needs a PS client, a table, epochs >= 1, depth >= 0 "
        "and embedding_dim >= 1");
  }
  const std::vector<int>& dims = options.tables.dims;
  if (!dims.empty() &&
      (dims.size() != options.tables.names.size() ||
       *std::min_element(dims.begin(), dims.end()) < 1 ||
       *std::max_element(dims.begin(), dims.end()) > options.embedding_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch pipeline needs one width in [1, ",
                     options.embedding_dim, "] per table; got ", dims.size(),
                     " for ", options.tables.names.size(), " tables"));
  }
  auto reader = CriteoReader::Open(options.reader);
  if (!reader.ok()) return reader.status();
  std::unique_ptr<BatchPipeline> pipeline(
      new BatchPipeline(std::move(options)));
  pipeline->reader_ = std::move(*reader);
  const BatchPipelineOptions& o = pipeline->options_;
  if (o.shuffle_window > 0) {
    // Whole batches per window: a window's last batch is not cut short.
    const size_t batch = static_cast<size_t>(o.reader.batch_size);
    const size_t window = (o.shuffle_window + batch - 1) / batch * batch;
    pipeline->shuffle_ = std::make_unique<ShuffleWindow>(
        pipeline->reader_.get(), window, o.reader.batch_size, o.shuffle_seed,
        o.first_epoch);
  }
  if (pipeline->options_.depth > 0) {
    pipeline->thread_ = std::thread([p = pipeline.get()] { p->Loop(); });
  }
  return pipeline;
}

BatchPipeline::BatchPipeline(BatchPipelineOptions options)
    : options_(std::move(options)) {}

BatchPipeline::~BatchPipeline() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status BatchPipeline::ReadExamples(Batch* batch) {
  if (shuffle_ != nullptr) return shuffle_->ReadBatch(batch);
  return reader_->ReadBatch(batch);
}

absl::Status BatchPipeline::StartNextEpoch() {
  if (shuffle_ != nullptr) return shuffle_->StartNextEpoch();
  return reader_->StartNextEpoch();
}

absl::StatusOr<std::unique_ptr<PreparedBatch>> BatchPipeline::Produce() {
  auto batch = std::make_unique<PreparedBatch>();
  while (true) {
    STRATA_RETURN_IF_ERROR(ReadExamples(&batch->examples));
    {
      absl::MutexLock lock(&mu_);
      malformed_ = reader_->stats().malformed;
    }
    if (batch->examples.size() == 0) {
      if (++epoch_ >= options_.epochs) return nullptr;
      STRATA_RETURN_IF_ERROR(StartNextEpoch());
      continue;
    }
    if (skipped_ < options_.skip_batches) {
      ++skipped_;
      continue;
    }
    break;
  }
  batch->epoch = epoch_;
  if (absl::Status s =
          IndexAndPull(*options_.ps, options_.tables, options_.embedding_dim,
                       options_.wide_table, &key_index_, batch.get());
      !s.ok()) {
    return s;
  }
  return batch;
}

void BatchPipeline::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || ready_.size() < static_cast<size_t>(options_.depth);
      };
      mu_.Await(absl::Condition(&room));
      if (stop_) return;
    }
    auto batch = Produce();
    absl::MutexLock lock(&mu_);
    if (!batch.ok()) {
      error_ = batch.status();
      done_ = true;
      return;
    }
    if (*batch == nullptr) {
      done_ = true;
      return;
    }
    ready_.push_back(std::move(*batch));
  }
}

absl::StatusOr<std::unique_ptr<PreparedBatch>> BatchPipeline::Next() {
  if (options_.depth == 0) return Produce();
  absl::MutexLock lock(&mu_);
  auto available = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ready_.empty() || done_;
  };
  mu_.Await(absl::Condition(&available));
  if (!ready_.empty()) {
    std::unique_ptr<PreparedBatch> batch = std::move(ready_.front());
    ready_.pop_front();
    return batch;
  }
  if (!error_.ok()) return error_;
  return nullptr;
}

int64_t BatchPipeline::malformed_lines() const {
  absl::MutexLock lock(&mu_);
  return malformed_;
}

}  // namespace strata
