#include "worker/model/dense_model.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

absl::Status SizeError(absl::string_view what, size_t got, size_t want) {
  return absl::InvalidArgumentError(
      absl::StrCat("batch ", what, " has ", got, " values, want ", want));
}

}  // namespace

absl::Status ValidateModelBatch(const ModelConfig& config,
                                const ModelBatch& batch) {
  if (batch.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size = ", batch.batch_size, " is not positive"));
  }
  const size_t examples = static_cast<size_t>(batch.batch_size);
  if (batch.dense.size() != examples * config.num_dense) {
    return SizeError("dense", batch.dense.size(), examples * config.num_dense);
  }
  if (batch.labels.size() != examples) {
    return SizeError("labels", batch.labels.size(), examples);
  }
  for (size_t i = 0; i < examples; ++i) {
    if (batch.labels[i] != 0.0f && batch.labels[i] != 1.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label of example ", i, " is ", batch.labels[i], ", want 0 or 1"));
    }
  }
  if (!batch.logit_offsets.empty() && batch.logit_offsets.size() != examples) {
    return SizeError("logit_offsets", batch.logit_offsets.size(), examples);
  }
  const size_t slots = examples * config.num_fields;
  if (batch.offsets.size() != slots + 1) {
    return SizeError("offsets", batch.offsets.size(), slots + 1);
  }
  if (batch.offsets[0] != 0) {
    return absl::InvalidArgumentError("batch offsets[0] is not 0");
  }
  for (size_t s = 0; s < slots; ++s) {
    if (batch.offsets[s + 1] < batch.offsets[s]) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch offsets decrease at ", s + 1));
    }
  }
  if (batch.rows.size() != batch.offsets[slots]) {
    return SizeError("rows", batch.rows.size(), batch.offsets[slots]);
  }
  if (batch.num_rows < 0 ||
      batch.embeddings.size() !=
          static_cast<size_t>(batch.num_rows) * config.embedding_dim) {
    return SizeError(
        "embeddings", batch.embeddings.size(),
        static_cast<size_t>(batch.num_rows) * config.embedding_dim);
  }
  for (size_t k = 0; k < batch.rows.size(); ++k) {
    if (batch.rows[k] >= static_cast<uint32_t>(batch.num_rows)) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch rows[", k, "] = ", batch.rows[k],
                       " is not below num_rows = ", batch.num_rows));
    }
  }
  return absl::OkStatus();
}

#ifndef STRATA_WITH_CUDA
absl::StatusOr<std::unique_ptr<DenseModel>> CreateCudaDenseModel(
    const ModelConfig& /*config*/, int /*device*/) {
  return absl::FailedPreconditionError(
      "this build has no CUDA support (configure with -DSTRATA_CUDA=ON)");
}

bool CudaModelCompiledIn() { return false; }
#endif

}  // namespace strata
