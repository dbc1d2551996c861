// Trainer::Evaluate: each rank predicts its slice of the eval set; an
// allreduce of the zero-padded predictions gives every rank all of them, so
// AUC and log loss are exact, not sampled or averaged.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "worker/collective/collective.h"
#include "worker/data/criteo_format.h"
#include "worker/data/metrics.h"
#include "worker/training/batch_pipeline.h"
#include "worker/training/trainer.h"

namespace strata {
namespace {

// Copies examples [begin, end) of `from` into `to`.
void SliceExamples(const Batch& from, size_t begin, size_t end, Batch* to) {
  to->Clear();
  to->AppendRange(from, begin, end);
}

}  // namespace

absl::Status Trainer::PredictSlice(size_t begin, size_t end,
                                   std::vector<float>* predictions) {
  const size_t chunk = static_cast<size_t>(options_.train.batch_size);
  PreparedBatch batch;
  KeyIndex key_index;
  for (size_t first = begin; first < end; first += chunk) {
    const size_t last = std::min(end, first + chunk);
    SliceExamples(*eval_data_, first, last, &batch.examples);
    if (absl::Status s = IndexAndPull(*pull_ps(), field_tables_,
                                      options_.model.embedding_dim,
                                      options_.wide_table, &key_index, &batch);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = model_->Predict(
            batch.View(),
            absl::MakeSpan(predictions->data() + first, last - first));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Trainer::Evaluate() {
  if (options_.eval_files.empty()) {
    return absl::FailedPreconditionError("no eval files were given");
  }
  if (eval_data_ == nullptr) {
    CriteoReaderOptions reader;
    reader.files = options_.eval_files;
    reader.strict = options_.train.strict;
    auto all = ReadAllCriteoExamples(reader);
    if (!all.ok()) return all.status();
    eval_data_ = std::make_unique<Batch>(std::move(*all));
  }
  const size_t count = eval_data_->size();
  if (count == 0) {
    return absl::InvalidArgumentError("the eval files hold no examples");
  }
  const size_t ranks = static_cast<size_t>(collective_->world_size());
  const size_t rank = static_cast<size_t>(collective_->rank());
  std::vector<float> predictions(count, 0.0f);
  absl::Status status = PredictSlice(count * rank / ranks,
                                     count * (rank + 1) / ranks, &predictions);
  // Every rank takes part in the allreduce even after a local failure (its
  // -1s push every sum out of [0, 1]), so that no peer waits until a
  // timeout.
  if (!status.ok()) std::fill(predictions.begin(), predictions.end(), -1.0f);
  if (absl::Status s = collective_->AllreduceSum(absl::MakeSpan(predictions));
      !s.ok()) {
    return s;
  }
  if (!status.ok()) return status;
  for (float p : predictions) {
    if (!(p >= 0.0f && p <= 1.0f)) {
      return absl::AbortedError("another rank failed to evaluate its slice");
    }
  }
  EvalResult result;
  result.examples = static_cast<int64_t>(count);
  result.auc = ExactAuc(eval_data_->labels, predictions);
  result.log_loss = LogLoss(eval_data_->labels, predictions);
  return result;
}

}  // namespace strata
