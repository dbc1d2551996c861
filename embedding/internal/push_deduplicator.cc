#include "embedding/internal/push_deduplicator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata {
namespace embedding_internal {

bool PushDeduplicator::Insert(Window& window, uint64_t sequence) {
  if (sequence <= window.floor) return false;
  if (!window.applied.insert(sequence).second) return false;
  if (window.applied.size() > kWindow) {
    window.floor = *window.applied.begin();
    window.applied.erase(window.applied.begin());
  }
  // Sequences right above the floor are applied without a gap: the floor
  // covers them.
  while (!window.applied.empty() &&
         *window.applied.begin() == window.floor + 1) {
    ++window.floor;
    window.applied.erase(window.applied.begin());
  }
  return true;
}

bool PushDeduplicator::ClaimLocked(const std::string& client_id,
                                   uint64_t sequence, absl::Time now) {
  Window& window = windows_[client_id];
  window.last_used = now;
  return Insert(window, sequence);
}

bool PushDeduplicator::Claim(const std::string& client_id, uint64_t sequence) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (!ClaimLocked(client_id, sequence, now)) return false;
  changed_.insert(client_id);
  return true;
}

bool PushDeduplicator::Applied(const std::string& client_id,
                               uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  auto it = windows_.find(client_id);
  if (it == windows_.end()) return false;
  return sequence <= it->second.floor || it->second.applied.count(sequence) > 0;
}

std::string PushDeduplicator::SerializeWindowWith(const std::string& client_id,
                                                  uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  auto it = windows_.find(client_id);
  // Windows are small (the floor covers what was applied without a gap).
  Window window = it == windows_.end() ? Window() : it->second;
  Insert(window, sequence);
  return Serialize(window);
}

void PushDeduplicator::ClaimPersisted(const std::string& client_id,
                                      uint64_t sequence) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  ClaimLocked(client_id, sequence, now);
}

void PushDeduplicator::MarkChanged(absl::Span<const std::string> client_ids) {
  absl::MutexLock lock(&mu_);
  for (const std::string& client : client_ids) {
    if (windows_.contains(client)) changed_.insert(client);
  }
}

std::string PushDeduplicator::Serialize(const Window& window) {
  // Fixed-width little-endian uint64s: floor, then each applied sequence.
  std::string out((1 + window.applied.size()) * sizeof(uint64_t), '\0');
  char* p = out.data();
  std::memcpy(p, &window.floor, sizeof(uint64_t));
  for (uint64_t sequence : window.applied) {
    p += sizeof(uint64_t);
    std::memcpy(p, &sequence, sizeof(uint64_t));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>>
PushDeduplicator::TakeChangedWindows() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(changed_.size());
  for (const std::string& client : changed_) {
    out.emplace_back(client, Serialize(windows_[client]));
  }
  changed_.clear();
  return out;
}

std::string PushDeduplicator::SerializeWindow(const std::string& client_id) {
  absl::MutexLock lock(&mu_);
  changed_.erase(client_id);
  return Serialize(windows_[client_id]);
}

absl::Status PushDeduplicator::LoadWindow(const std::string& client_id,
                                          absl::string_view serialized) {
  if (serialized.empty() || serialized.size() % sizeof(uint64_t) != 0) {
    return absl::DataLossError(absl::StrCat("stored push window of client '",
                                            client_id, "' is corrupt"));
  }
  Window window;
  std::memcpy(&window.floor, serialized.data(), sizeof(uint64_t));
  for (size_t off = sizeof(uint64_t); off < serialized.size();
       off += sizeof(uint64_t)) {
    uint64_t sequence;
    std::memcpy(&sequence, serialized.data() + off, sizeof(uint64_t));
    window.applied.insert(sequence);
  }
  // A window loaded at start counts as used then.
  window.last_used = clock_->Now();
  absl::MutexLock lock(&mu_);
  windows_[client_id] = std::move(window);
  return absl::OkStatus();
}

std::vector<std::string> PushDeduplicator::Expire(absl::Duration ttl,
                                                  size_t max_windows) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  std::vector<std::string> expired;
  std::vector<std::pair<absl::Time, std::string>> kept;
  for (const auto& [client, window] : windows_) {
    if (now - window.last_used >= ttl) {
      expired.push_back(client);
    } else {
      kept.emplace_back(window.last_used, client);
    }
  }
  if (kept.size() > max_windows) {
    // The least recently used go first.
    const size_t excess = kept.size() - max_windows;
    std::nth_element(kept.begin(), kept.begin() + excess, kept.end());
    for (size_t i = 0; i < excess; ++i) expired.push_back(kept[i].second);
  }
  for (const std::string& client : expired) {
    windows_.erase(client);
    changed_.erase(client);
  }
  return expired;
}

size_t PushDeduplicator::size() {
  absl::MutexLock lock(&mu_);
  return windows_.size();
}

void PushDeduplicator::Clear() {
  absl::MutexLock lock(&mu_);
  windows_.clear();
  changed_.clear();
}

}  // namespace embedding_internal
}  // namespace strata
