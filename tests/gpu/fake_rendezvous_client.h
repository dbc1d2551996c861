#ifndef STRATA_TESTS_GPU_FAKE_RENDEZVOUS_CLIENT_H_
#define STRATA_TESTS_GPU_FAKE_RENDEZVOUS_CLIENT_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/collective/rendezvous.h"

namespace strata {
namespace testing {

// An in-process RendezvousClient: a map that Get waits on. Share one between
// the threads that play the ranks of a job. Thread-safe.
class FakeRendezvousClient : public RendezvousClient {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    absl::MutexLock lock(&mu_);
    values_[key] = std::string(value);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    Lookup lookup{&values_, std::string(key)};
    if (!mu_.AwaitWithTimeout(absl::Condition(&Lookup::Found, &lookup),
                              timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous key ", key, " was not set in time"));
    }
    return values_[key];
  }

  // The value under key, or "" when there is none; does not wait.
  std::string ValueForTest(absl::string_view key) {
    absl::MutexLock lock(&mu_);
    auto it = values_.find(key);
    return it == values_.end() ? std::string() : it->second;
  }

 private:
  // The condition Get waits for; evaluated with mu_ held.
  struct Lookup {
    const absl::flat_hash_map<std::string, std::string>* values;
    std::string key;
    static bool Found(Lookup* lookup) {
      return lookup->values->contains(lookup->key);
    }
  };

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_GPU_FAKE_RENDEZVOUS_CLIENT_H_
