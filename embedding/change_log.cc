#include "embedding/change_log.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

uint64_t RandomIncarnation() {
  std::random_device device;
  uint64_t value = 0;
  while (value == 0) {  // 0 means "none" on the wire.
    value = (static_cast<uint64_t>(device()) << 32) | device();
  }
  return value;
}

}  // namespace

size_t ChangeRecord::bytes() const {
  size_t total = sizeof(ChangeRecord);
  for (const ChangedRows& changed : rows) {
    total += changed.table.size() + changed.keys.size() * sizeof(FeatureId) +
             changed.values.size() * sizeof(float);
  }
  for (const DeletedRows& gone : deleted) {
    total += gone.table.size() + gone.keys.size() * sizeof(FeatureId);
  }
  return total;
}

ChangeLog::ChangeLog(size_t max_bytes, Clock* clock, bool hold_until_published)
    : max_bytes_(max_bytes),
      clock_(clock),
      hold_until_published_(hold_until_published),
      incarnation_(RandomIncarnation()) {}

uint64_t ChangeLog::incarnation() const {
  absl::MutexLock lock(&mu_);
  return incarnation_;
}

uint64_t ChangeLog::latest_sequence() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

uint64_t ChangeLog::appended_sequence() const {
  absl::MutexLock lock(&mu_);
  return appended_;
}

uint64_t ChangeLog::Append(const Filler& fill) {
  auto record = std::make_shared<ChangeRecord>();
  absl::MutexLock lock(&mu_);
  record->followed = followed_;
  fill(*record);
  record->sequence = ++appended_;
  if (!hold_until_published_) latest_ = appended_;
  if (record->rows_left_out) {
    // Nothing before this record can be replayed past it: drop it all, so
    // that the kept records stay consecutive and a reader from before it
    // gets OUT_OF_RANGE (and a snapshot).
    bytes_ = 0;
    records_.clear();
    return appended_;
  }
  record->acknowledged = clock_->Now();
  bytes_ += record->bytes();
  records_.push_back(std::move(record));
  // Keep at least the newest record, whatever its size.
  while (bytes_ > max_bytes_ && records_.size() > 1) {
    bytes_ -= records_.front()->bytes();
    records_.pop_front();
  }
  return appended_;
}

void ChangeLog::NoteReader() const {
  absl::MutexLock lock(&mu_);
  followed_ = true;
}

void ChangeLog::Publish(uint64_t through) {
  absl::MutexLock lock(&mu_);
  latest_ = std::max(latest_, std::min(through, appended_));
}

void ChangeLog::StartNewIncarnation() {
  absl::MutexLock lock(&mu_);
  incarnation_ = RandomIncarnation();
  latest_ = 0;
  appended_ = 0;
  bytes_ = 0;
  records_.clear();
}

absl::Status ChangeLog::ReadAfter(
    uint64_t after, size_t max_records,
    std::vector<std::shared_ptr<const ChangeRecord>>* out) const {
  absl::MutexLock lock(&mu_);
  if (after > latest_) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence ", after, " is past the shard's latest ",
                     latest_, " of incarnation ", incarnation_));
  }
  if (after == latest_) return absl::OkStatus();
  if (records_.empty() || records_.front()->sequence > after + 1) {
    return absl::OutOfRangeError(absl::StrCat(
        "changes after sequence ", after, " are no longer kept (oldest kept: ",
        records_.empty() ? latest_ + 1 : records_.front()->sequence, ")"));
  }
  const size_t first = after + 1 - records_.front()->sequence;
  const size_t published = latest_ + 1 - records_.front()->sequence;
  for (size_t i = first; i < published && out->size() < max_records; ++i) {
    out->push_back(records_[i]);
  }
  return absl::OkStatus();
}

bool ChangeLog::WaitForChange(uint64_t after, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, after]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return latest_ > after;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
}

}  // namespace strata
