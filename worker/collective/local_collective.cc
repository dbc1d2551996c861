// CreateLocalCollective: the collective of a job with one rank.

#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/collective/collective.h"

namespace strata {
namespace {

// Every operation leaves the data as it is: the sum over one rank, and the
// root's data, are this rank's data.
class LocalCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend() const override { return "local"; }

  absl::Status AllreduceSum(absl::Span<float>) override {
    return absl::OkStatus();
  }

  absl::Status Broadcast(absl::Span<float>, int root) override {
    if (root != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "broadcast root ", root, " is not a rank of a job of 1 rank"));
    }
    return absl::OkStatus();
  }

  absl::Status Barrier() override { return absl::OkStatus(); }
};

}  // namespace

std::unique_ptr<Collective> CreateLocalCollective() {
  return std::make_unique<LocalCollective>();
}

}  // namespace strata
