#ifndef STRATA_CLIENT_INTERNAL_SHARED_ANSWER_SLOTS_H_
#define STRATA_CLIENT_INTERNAL_SHARED_ANSWER_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_memory.h"

namespace strata {
namespace client_internal {

// A client's shared memory for pull answers (v1::SharedAnswer), cut into
// slots, one per pull in flight. Each slot starts with its claim line (see
// SharedAnswerClaim in common/pull_wire.h), so that a shard still writing
// the answer of a pull the client gave up never writes into the answer of
// the next pull to use the slot. Thread-safe. Kept alive by the answers
// that still point into it.
//
// Example:
//   std::optional<SharedAnswerSlots::Offer> offer = slots->TryOffer();
//   // ... append offer->request_field to the serialized PullRequest; send.
//   // Answered: read answer_data(offer->slot), then Release(offer->slot).
//   // Failed: Abandon(offer->slot).
class SharedAnswerSlots {
 public:
  struct Offer {
    size_t slot = 0;
    // A serialized PullRequest holding only the slot's SharedAnswer:
    // appended to a serialized request, it adds the field.
    std::string request_field;
  };

  // INVALID_ARGUMENT when there is no slot, a slot has no room past its
  // claim line, or the whole is over 1 TiB; errors of SharedMemory::Create.
  static absl::StatusOr<std::shared_ptr<SharedAnswerSlots>> Create(
      size_t slots, size_t slot_bytes);

  // A free slot, offered under a new generation of its claim word; nullopt
  // when every slot is taken (or still written by a shard).
  std::optional<Offer> TryOffer();
  // After the pull was answered: the shard is done with the slot.
  void Release(size_t slot);
  // After the pull failed: the slot is free again once the shard can no
  // longer write it (at once, unless the shard is writing it now; then
  // once it marks the slot written, or its process is gone).
  void Abandon(size_t slot);

  // Where a slot's answer starts, and the room for it.
  const uint8_t* answer_data(size_t slot) const;
  size_t answer_capacity() const;
  // Slots that wait for a shard to finish writing a given-up answer.
  size_t waiting() const;

 private:
  SharedAnswerSlots(std::unique_ptr<SharedMemory> memory, size_t slots,
                    size_t slot_bytes);
  uint8_t* slot_region(size_t slot) const;
  void ReclaimWrittenLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<SharedMemory> memory_;
  const size_t slot_bytes_;
  const std::string token_;
  mutable absl::Mutex mu_;
  std::vector<size_t> free_ ABSL_GUARDED_BY(mu_);
  // Given up while a shard was writing them.
  std::vector<size_t> waiting_ ABSL_GUARDED_BY(mu_);
  // Per slot: the generation of its last offer.
  std::vector<uint64_t> generations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace strata

#endif  // STRATA_CLIENT_INTERNAL_SHARED_ANSWER_SLOTS_H_
