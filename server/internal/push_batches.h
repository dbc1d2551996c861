#ifndef STRATA_SERVER_INTERNAL_PUSH_BATCHES_H_
#define STRATA_SERVER_INTERNAL_PUSH_BATCHES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "embedding/embedding_store.h"
#include "proto/strata.pb.h"

namespace strata {
namespace server_internal {

// The batches of `request` as the store takes them, viewing the request's
// keys and gradients; FLOAT16 gradients are decoded into `decoded`, which
// must outlive the result. Adds the number of keys to `keys`.
// INVALID_ARGUMENT for an unknown encoding or an odd fp16 byte count.
absl::StatusOr<std::vector<GradientBatch>> DecodePushBatches(
    const v1::PushRequest& request, std::vector<std::vector<float>>& decoded,
    uint64_t& keys);

}  // namespace server_internal
}  // namespace strata

#endif  // STRATA_SERVER_INTERNAL_PUSH_BATCHES_H_
