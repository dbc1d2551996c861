#include "server/internal/shared_answers.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "proto/strata.pb.h"

namespace strata {
namespace server_internal {
namespace {

// The region's bounds within a memory of `size` bytes, checked without
// overflow.
absl::Status CheckRegion(const v1::SharedAnswer& request) {
  if (request.offset() % kSharedAnswerAlignment != 0 ||
      request.capacity() <= kSharedAnswerClaimBytes ||
      request.offset() > request.size() ||
      request.capacity() > request.size() - request.offset()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared answer region at ", request.offset(), " of ",
        request.capacity(), " bytes does not fit a memory of ", request.size(),
        " bytes at a multiple of ", kSharedAnswerAlignment,
        ", with room past its claim line of ", kSharedAnswerClaimBytes,
        " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

SharedAnswers::SharedAnswers(const SharedAnswersOptions& options)
    : options_(options), last_sweep_(options.clock->Now()) {}

size_t SharedAnswers::memories() const {
  absl::ReaderMutexLock lock(&mu_);
  return by_path_.size();
}

absl::StatusOr<SharedAnswers::Region> SharedAnswers::Find(
    const v1::SharedAnswer& request) {
  if (request.token().size() != kSharedAnswerTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared answer token of ", request.token().size(),
                     " bytes, want ", kSharedAnswerTokenBytes));
  }
  if (absl::Status region = CheckRegion(request); !region.ok()) return region;
  std::shared_ptr<const SharedMemory> memory;
  const absl::Time now = options_.clock->Now();
  {
    absl::ReaderMutexLock lock(&mu_);
    auto found = by_path_.find(request.path());
    if (found != by_path_.end() && found->second.token == request.token() &&
        found->second.memory->size() == request.size() &&
        now - last_sweep_ < options_.sweep_every) {
      memory = found->second.memory;
    }
  }
  if (memory == nullptr) {
    absl::MutexLock lock(&mu_);
    if (now - last_sweep_ >= options_.sweep_every) SweepLocked();
    absl::StatusOr<std::shared_ptr<const SharedMemory>> mapped =
        MemoryFor(request);
    if (!mapped.ok()) return mapped.status();
    memory = *std::move(mapped);
  }
  Region region;
  region.data = memory->data() + request.offset();
  region.capacity = request.capacity();
  region.memory = std::move(memory);
  return region;
}

absl::StatusOr<std::shared_ptr<const SharedMemory>> SharedAnswers::MemoryFor(
    const v1::SharedAnswer& request) {
  auto found = by_path_.find(request.path());
  if (found != by_path_.end()) {
    const Mapped& mapped = found->second;
    if (mapped.token == request.token() &&
        mapped.memory->size() == request.size()) {
      return mapped.memory;
    }
    // The path names another memory now (its client closed the old one and
    // the descriptor was reused), or the request is wrong: map it afresh.
    by_path_.erase(found);
  }
  if (by_path_.size() >= options_.max_memories) SweepLocked();
  if (by_path_.size() >= options_.max_memories) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the shard holds the shared memory of ", by_path_.size(),
        " clients already (the most it maps); answering over gRPC"));
  }
  absl::StatusOr<std::unique_ptr<SharedMemory>> opened = SharedMemory::Open(
      request.path(), request.size(), options_.max_memory_bytes);
  if (!opened.ok()) return opened.status();
  if (std::memcmp((*opened)->data(), request.token().data(),
                  kSharedAnswerTokenBytes) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        request.path(), " does not start with the request's token"));
  }
  Mapped& mapped = by_path_[request.path()];
  mapped.memory = std::shared_ptr<const SharedMemory>(*std::move(opened));
  mapped.token = request.token();
  return mapped.memory;
}

void SharedAnswers::SweepLocked() {
  last_sweep_ = options_.clock->Now();
  std::vector<std::string> gone;
  for (const auto& [path, mapped] : by_path_) {
    if (!mapped.memory->StillNamedBy(path)) gone.push_back(path);
  }
  // A pull still writing into one keeps its mapping until it is done.
  for (const std::string& path : gone) by_path_.erase(path);
}

}  // namespace server_internal
}  // namespace strata
