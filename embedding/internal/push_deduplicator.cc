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
  return true;
}

bool PushDeduplicator::Claim(const std::string& client_id, uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (!Insert(windows_[client_id], sequence)) return false;
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
  static const Window kEmpty;
  auto it = windows_.find(client_id);
  const Window& window = it == windows_.end() ? kEmpty : it->second;
  if (sequence <= window.floor || window.applied.count(sequence) > 0) {
    return Serialize(window);
  }
  // What Insert would make of it, without copying the window.
  std::vector<uint64_t> applied(window.applied.begin(), window.applied.end());
  applied.insert(std::lower_bound(applied.begin(), applied.end(), sequence),
                 sequence);
  uint64_t floor = window.floor;
  if (applied.size() > kWindow) {
    floor = applied.front();
    applied.erase(applied.begin());
  }
  std::string out((1 + applied.size()) * sizeof(uint64_t), '\0');
  std::memcpy(out.data(), &floor, sizeof(uint64_t));
  std::memcpy(out.data() + sizeof(uint64_t), applied.data(),
              applied.size() * sizeof(uint64_t));
  return out;
}

void PushDeduplicator::ClaimPersisted(const std::string& client_id,
                                      uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  Insert(windows_[client_id], sequence);
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
  absl::MutexLock lock(&mu_);
  windows_[client_id] = std::move(window);
  return absl::OkStatus();
}

void PushDeduplicator::Clear() {
  absl::MutexLock lock(&mu_);
  windows_.clear();
  changed_.clear();
}

}  // namespace embedding_internal
}  // namespace strata
