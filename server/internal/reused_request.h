#ifndef STRATA_SERVER_INTERNAL_REUSED_REQUEST_H_
#define STRATA_SERVER_INTERNAL_REUSED_REQUEST_H_

#include <array>
#include <cstddef>
#include <optional>

#include "proto/strata.pb.h"

namespace strata {
namespace server_internal {

// The bytes a kept Pull or Push request's buffers hold, counted from the
// capacities of its fields: protobuf's SpaceUsedLong walks every field
// through reflection, a cost paid on every call. A parse clears the batches
// it does not need and keeps their buffers, so the room of each batch
// position is remembered from the last request that used it.
class KeptRequestRoom {
 public:
  // Requests with more batches than this are not kept (a request has
  // a batch per table it touches).
  static constexpr size_t kMaxBatches = 16;

  // Takes the room of `request` as parsed now. False when it has more than
  // kMaxBatches batches or unknown fields (whose room is not counted).
  bool Update(const v1::PullRequest& request);
  bool Update(const v1::PushRequest& request);
  // Bytes held by every batch position used so far and the top-level
  // strings of the last request.
  size_t bytes() const;
  void Reset();

 private:
  template <typename Request>
  bool UpdateBatches(const Request& request);

  std::array<size_t, kMaxBatches> batch_bytes_{};
  size_t top_level_bytes_ = 0;
};

// The request message of a Pull or Push, kept by each request thread from
// call to call. Parsing into a message whose fields still have the room of
// the last request copies each value once; a fresh message grew its
// repeated fields as the bytes arrived, copying them again at each
// doubling, and faulted the pages of its new buffers in (together about a
// tenth of a pushing shard's CPU). A message holding more than
// kMaxKeptRequestBytes is freed when its call ends, so a thread keeps no
// more than that; a call made while the thread's message is in use (none
// is today) gets its own.
template <typename Request>
class ReusedRequest {
 public:
  static constexpr size_t kMaxKeptRequestBytes = size_t{8} << 20;

  ReusedRequest() {
    if (Slot().in_use) {
      own_.emplace();
    } else {
      Slot().in_use = true;
    }
  }
  ~ReusedRequest() {
    if (own_.has_value()) return;
    Kept& kept = Slot();
    if (!kept.room.Update(kept.request) ||
        kept.room.bytes() > kMaxKeptRequestBytes) {
      Request().Swap(&kept.request);
      kept.room.Reset();
    }
    kept.in_use = false;
  }
  ReusedRequest(const ReusedRequest&) = delete;
  ReusedRequest& operator=(const ReusedRequest&) = delete;

  Request* get() { return own_.has_value() ? &*own_ : &Slot().request; }

  // What this thread's kept message holds now (tests).
  static size_t KeptBytes() { return Slot().room.bytes(); }

 private:
  struct Kept {
    Request request;
    KeptRequestRoom room;
    bool in_use = false;
  };
  static Kept& Slot() {
    thread_local Kept kept;
    return kept;
  }

  std::optional<Request> own_;
};

}  // namespace server_internal
}  // namespace strata

#endif  // STRATA_SERVER_INTERNAL_REUSED_REQUEST_H_
