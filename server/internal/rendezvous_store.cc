#include "server/internal/rendezvous_store.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace server_internal {

namespace {

// A message quotes at most this many bytes of a key, escaped: keys come
// from the network.
constexpr size_t kQuotedKeyBytes = 64;

std::string Quote(absl::string_view key) {
  return absl::StrCat("'", absl::CHexEscape(key.substr(0, kQuotedKeyBytes)),
                      key.size() > kQuotedKeyBytes ? "...'" : "'");
}

}  // namespace

RendezvousStore::RendezvousStore(const RendezvousStoreLimits& limits)
    : limits_(limits) {}

absl::Status RendezvousStore::CheckKey(absl::string_view key) const {
  if (key.empty()) {
    return absl::InvalidArgumentError("rendezvous key is empty");
  }
  if (key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous key ", Quote(key), " has ", key.size(),
                     " bytes, over the maximum of ", limits_.max_key_bytes));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::Set(absl::string_view key,
                                  absl::string_view value) {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  if (value.size() > limits_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value of rendezvous key ", Quote(key), " has ", value.size(),
        " bytes, over the maximum of ", limits_.max_value_bytes));
  }
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  const bool is_new = it == values_.end();
  if (is_new && values_.size() >= limits_.max_keys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous store holds its maximum of ", limits_.max_keys,
                     " keys; cannot add ", Quote(key)));
  }
  const size_t old_bytes = is_new ? 0 : key.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  const size_t total = total_bytes_ - old_bytes + new_bytes;
  if (total > limits_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous store would hold ", total, " bytes with key ", Quote(key),
        ", over its maximum of ", limits_.max_total_bytes));
  }
  if (is_new) {
    values_.emplace(key, value);
  } else {
    it->second.assign(value.data(), value.size());
  }
  total_bytes_ = total;
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::Get(absl::string_view key) const {
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::NotFoundError(
        absl::StrCat("rendezvous key ", Quote(key), " is not set"));
  }
  return it->second;
}

size_t RendezvousStore::num_keys() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

size_t RendezvousStore::total_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

}  // namespace server_internal
}  // namespace strata
