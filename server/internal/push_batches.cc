#include "server/internal/push_batches.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fp16.h"

namespace strata {
namespace server_internal {

absl::StatusOr<std::vector<GradientBatch>> DecodePushBatches(
    const v1::PushRequest& request, std::vector<std::vector<float>>& decoded,
    uint64_t& keys) {
  const bool fp16 = request.encoding() == v1::FLOAT16;
  if (!fp16 && request.encoding() != v1::FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown value encoding ", request.encoding()));
  }
  decoded.assign(fp16 ? static_cast<size_t>(request.batches_size()) : 0, {});
  std::vector<GradientBatch> batches;
  batches.reserve(request.batches_size());
  for (int b = 0; b < request.batches_size(); ++b) {
    const v1::TableBatch& batch = request.batches(b);
    absl::Span<const float> gradients(batch.values().data(),
                                      batch.values_size());
    if (fp16) {
      if (batch.values_fp16().size() % sizeof(uint16_t) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("push batch of table '", batch.table(),
                         "': values_fp16 has an odd number of bytes"));
      }
      const size_t count = batch.values_fp16().size() / sizeof(uint16_t);
      std::vector<uint16_t> halves(count);
      std::memcpy(halves.data(), batch.values_fp16().data(),
                  batch.values_fp16().size());
      decoded[b].resize(count);
      HalvesToFloats(halves.data(), count, decoded[b].data());
      gradients = absl::MakeConstSpan(decoded[b]);
    }
    batches.push_back(GradientBatch{
        batch.table(),
        absl::Span<const FeatureId>(batch.keys().data(), batch.keys_size()),
        gradients, request.global_step()});
    keys += static_cast<uint64_t>(batch.keys_size());
  }
  return batches;
}

}  // namespace server_internal
}  // namespace strata
