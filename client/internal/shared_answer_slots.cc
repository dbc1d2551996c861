#include "client/internal/shared_answer_slots.h"

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/pull_wire.h"
#include "common/status_macros.h"
#include "proto/strata.pb.h"

namespace strata {
namespace client_internal {
namespace {

// Bytes before the first slot: the token (the rest unused), so that slots
// start on a page.
constexpr size_t kHeaderBytes = 4096;

std::string RandomToken() {
  std::random_device device;
  std::string token(kSharedAnswerTokenBytes, '\0');
  for (size_t i = 0; i < kSharedAnswerTokenBytes; i += sizeof(uint32_t)) {
    const uint32_t word = device();
    std::memcpy(&token[i], &word, sizeof(word));
  }
  return token;
}

// False only when no process `pid` exists any more: a writer not known
// yet (0), or one this process may not signal, may still write.
bool WriterMayExist(uint64_t pid) {
  if (pid == 0 || pid > static_cast<uint64_t>(INT32_MAX)) return true;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedAnswerSlots>> SharedAnswerSlots::Create(
    size_t slots, size_t slot_bytes) {
  slot_bytes = (slot_bytes + kSharedAnswerAlignment - 1) /
               kSharedAnswerAlignment * kSharedAnswerAlignment;
  if (slots == 0 || slot_bytes <= kSharedAnswerClaimBytes ||
      slots > (size_t{1} << 40) / slot_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory of ", slots, " slots of ", slot_bytes,
                     " bytes: want at least one slot of more than ",
                     kSharedAnswerClaimBytes, " bytes, at most 1 TiB"));
  }
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<SharedMemory> memory,
      SharedMemory::Create(kHeaderBytes + slots * slot_bytes));
  return std::shared_ptr<SharedAnswerSlots>(
      new SharedAnswerSlots(std::move(memory), slots, slot_bytes));
}

SharedAnswerSlots::SharedAnswerSlots(std::unique_ptr<SharedMemory> memory,
                                     size_t slots, size_t slot_bytes)
    : memory_(std::move(memory)),
      slot_bytes_(slot_bytes),
      token_(RandomToken()) {
  std::memcpy(memory_->data(), token_.data(), token_.size());
  absl::MutexLock lock(&mu_);
  generations_.assign(slots, 0);
  for (size_t slot = 0; slot < slots; ++slot) free_.push_back(slots - 1 - slot);
}

uint8_t* SharedAnswerSlots::slot_region(size_t slot) const {
  return memory_->data() + kHeaderBytes + slot * slot_bytes_;
}

std::optional<SharedAnswerSlots::Offer> SharedAnswerSlots::TryOffer() {
  size_t slot = 0;
  uint64_t offered = 0;
  {
    absl::MutexLock lock(&mu_);
    if (free_.empty()) ReclaimWrittenLocked();
    if (free_.empty()) return std::nullopt;
    slot = free_.back();
    free_.pop_back();
    offered = SharedAnswerClaimWord(++generations_[slot],
                                    SharedAnswerClaim::kOffered);
  }
  StoreSharedAnswerWriter(slot_region(slot), 0);
  StoreSharedAnswerClaim(slot_region(slot), offered);
  v1::PullRequest field;
  v1::SharedAnswer& shared = *field.mutable_shared_answer();
  shared.set_path(memory_->path());
  shared.set_size(memory_->size());
  shared.set_token(token_);
  shared.set_offset(kHeaderBytes + slot * slot_bytes_);
  shared.set_capacity(slot_bytes_);
  shared.set_claim(offered);
  return Offer{slot, field.SerializeAsString()};
}

void SharedAnswerSlots::Release(size_t slot) {
  absl::MutexLock lock(&mu_);
  free_.push_back(slot);
}

void SharedAnswerSlots::Abandon(size_t slot) {
  absl::MutexLock lock(&mu_);
  const uint64_t generation = generations_[slot];
  uint64_t word =
      SharedAnswerClaimWord(generation, SharedAnswerClaim::kOffered);
  if (ExchangeSharedAnswerClaim(
          slot_region(slot), &word,
          SharedAnswerClaimWord(generation, SharedAnswerClaim::kAbandoned)) ||
      word != SharedAnswerClaimWord(generation, SharedAnswerClaim::kWriting)) {
    free_.push_back(slot);
    return;
  }
  waiting_.push_back(slot);
}

void SharedAnswerSlots::ReclaimWrittenLocked() {
  for (size_t i = 0; i < waiting_.size();) {
    const size_t slot = waiting_[i];
    if (LoadSharedAnswerClaim(slot_region(slot)) ==
            SharedAnswerClaimWord(generations_[slot],
                                  SharedAnswerClaim::kWriting) &&
        WriterMayExist(LoadSharedAnswerWriter(slot_region(slot)))) {
      ++i;
      continue;
    }
    free_.push_back(slot);
    waiting_[i] = waiting_.back();
    waiting_.pop_back();
  }
}

const uint8_t* SharedAnswerSlots::answer_data(size_t slot) const {
  return slot_region(slot) + kSharedAnswerClaimBytes;
}

size_t SharedAnswerSlots::answer_capacity() const {
  return slot_bytes_ - kSharedAnswerClaimBytes;
}

size_t SharedAnswerSlots::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size();
}

}  // namespace client_internal
}  // namespace strata
