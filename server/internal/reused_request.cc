#include "server/internal/reused_request.h"

#include <cstdint>
#include <numeric>

namespace strata {
namespace server_internal {
namespace {

size_t BatchBytes(const v1::TableBatch& batch) {
  return sizeof(v1::TableBatch) + batch.table().capacity() +
         batch.keys().Capacity() * sizeof(uint64_t) +
         batch.values().Capacity() * sizeof(float) +
         batch.values_fp16().capacity() + batch.padding().capacity();
}

// Through reflection, but only to read the message's unknown field set.
bool HasUnknownFields(const google::protobuf::Message& message) {
  return !message.GetReflection()->GetUnknownFields(message).empty();
}

}  // namespace

template <typename Request>
bool KeptRequestRoom::UpdateBatches(const Request& request) {
  const size_t batches = static_cast<size_t>(request.batches_size());
  if (batches > kMaxBatches || HasUnknownFields(request)) return false;
  for (size_t i = 0; i < batches; ++i) {
    const v1::TableBatch& batch = request.batches(static_cast<int>(i));
    if (HasUnknownFields(batch)) return false;
    batch_bytes_[i] = BatchBytes(batch);
  }
  return true;
}

bool KeptRequestRoom::Update(const v1::PullRequest& request) {
  if (!UpdateBatches(request)) return false;
  const v1::SharedAnswer& shared = request.shared_answer();
  if (HasUnknownFields(shared)) return false;
  top_level_bytes_ = shared.path().capacity() + shared.token().capacity();
  return true;
}

bool KeptRequestRoom::Update(const v1::PushRequest& request) {
  if (!UpdateBatches(request)) return false;
  top_level_bytes_ = request.client_id().capacity();
  return true;
}

size_t KeptRequestRoom::bytes() const {
  return std::accumulate(batch_bytes_.begin(), batch_bytes_.end(),
                         top_level_bytes_);
}

void KeptRequestRoom::Reset() {
  batch_bytes_.fill(0);
  top_level_bytes_ = 0;
}

}  // namespace server_internal
}  // namespace strata
