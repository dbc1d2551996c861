#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/shard_client.h"
#include "common/primary_redirect.h"
#include "common/status_macros.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/strata.pb.h"

namespace strata {
namespace {

// The replicas of one shard index, behind one ShardClient: calls go to the
// replica believed primary; a redirect answer moves to the replica it names
// and an unreachable one to the next, and both come back as UNAVAILABLE so
// that PsClient retries them within its deadline (pushes keep their
// (client_id, sequence), so a retry is applied once).
class ReplicaGroupShardClient final : public ShardClient {
 public:
  explicit ReplicaGroupShardClient(
      std::vector<std::unique_ptr<ShardClient>> replicas)
      : replicas_(std::move(replicas)) {
    std::vector<std::string> addresses;
    for (const auto& replica : replicas_) {
      addresses.push_back(replica->address());
    }
    address_ = absl::StrJoin(addresses, "|");
  }

  const std::string& address() const override { return address_; }

  void PullAsync(const v1::PullRequest& request, grpc::ByteBuffer* response,
                 absl::Duration deadline, Done done) override {
    const size_t index = current_.load();
    replicas_[index]->PullAsync(request, response, deadline,
                                Follow(index, std::move(done)));
  }

  void PushAsync(const v1::PushRequest& request, v1::PushResponse* response,
                 absl::Duration deadline, Done done) override {
    const size_t index = current_.load();
    replicas_[index]->PushAsync(request, response, deadline,
                                Follow(index, std::move(done)));
  }

  absl::Status CreateTable(const v1::CreateTableRequest& request,
                           v1::CreateTableResponse* response,
                           absl::Duration deadline) override {
    return Admin([&](ShardClient& replica) {
      return replica.CreateTable(request, response, deadline);
    });
  }
  absl::Status ListTables(v1::ListTablesResponse* response,
                          absl::Duration deadline) override {
    return Admin([&](ShardClient& replica) {
      return replica.ListTables(response, deadline);
    });
  }
  // Followers answer Stats too (about themselves): the group's are the
  // primary's, so a follower's answer is asked again of the primary it
  // names.
  absl::Status Stats(v1::StatsResponse* response,
                     absl::Duration deadline) override {
    STRATA_RETURN_IF_ERROR(Admin([&](ShardClient& replica) {
      return replica.Stats(response, deadline);
    }));
    if (!response->has_replication() || response->replication().primary()) {
      return absl::OkStatus();
    }
    for (size_t i = 0; i < replicas_.size(); ++i) {
      if (replicas_[i]->address() !=
          response->replication().primary_address()) {
        continue;
      }
      v1::StatsResponse primary;
      if (replicas_[i]->Stats(&primary, deadline).ok()) {
        current_.store(i);
        *response = std::move(primary);
      }
    }
    return absl::OkStatus();
  }
  absl::Status Checkpoint(const v1::CheckpointRequest& request,
                          v1::CheckpointResponse* response,
                          absl::Duration deadline) override {
    return Admin([&](ShardClient& replica) {
      return replica.Checkpoint(request, response, deadline);
    });
  }
  absl::Status Restore(const v1::RestoreRequest& request,
                       v1::RestoreResponse* response,
                       absl::Duration deadline) override {
    return Admin([&](ShardClient& replica) {
      return replica.Restore(request, response, deadline);
    });
  }
  absl::Status GetShardMap(v1::ShardMap* response,
                           absl::Duration deadline) override {
    return Admin([&](ShardClient& replica) {
      return replica.GetShardMap(response, deadline);
    });
  }
  absl::Status SetShardMap(const v1::SetShardMapRequest& request,
                           v1::SetShardMapResponse* response,
                           absl::Duration deadline) override {
    return Admin([&](ShardClient& replica) {
      return replica.SetShardMap(request, response, deadline);
    });
  }
  // A move's steps are not all safe to run twice (CATCH_UP hands each
  // pushed key over once), so the step is sent once, to the primary found
  // first by a call that is (GetShardMap); a failure, a redirect included,
  // ends the step and the driver starts it over.
  absl::Status MoveBuckets(const v1::MoveBucketsRequest& request,
                           v1::MoveBucketsResponse* response,
                           absl::Duration deadline) override {
    v1::ShardMap ignored;
    STRATA_RETURN_IF_ERROR(Admin([&](ShardClient& replica) {
      return replica.GetShardMap(&ignored, deadline);
    }));
    const size_t index = current_.load();
    const absl::Status status =
        replicas_[index]->MoveBuckets(request, response, deadline);
    return status.ok() ? status : Redirect(index, status);
  }
  // OK when any replica is healthy.
  absl::Status CheckHealth(absl::Duration deadline) override {
    absl::Status last;
    for (const auto& replica : replicas_) {
      last = replica->CheckHealth(deadline);
      if (last.ok()) return last;
    }
    return last;
  }

 private:
  // Moves to the replica `status` names, or past `failed` when it could not
  // be reached; returns the status the caller sees.
  absl::Status Redirect(size_t failed, const absl::Status& status) {
    if (std::optional<std::string> named = RedirectedPrimary(status)) {
      for (size_t i = 0; i < replicas_.size(); ++i) {
        if (replicas_[i]->address() == *named) current_.store(i);
      }
      return absl::UnavailableError(status.message());
    }
    if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
      size_t expected = failed;
      current_.compare_exchange_strong(expected,
                                       (failed + 1) % replicas_.size());
    }
    return status;
  }

  Done Follow(size_t index, Done done) {
    return [this, index, done = std::move(done)](absl::Status status) {
      done(status.ok() ? status : Redirect(index, status));
    };
  }

  // Admin calls block: each replica is tried once, following redirects.
  template <typename Call>
  absl::Status Admin(const Call& call) {
    absl::Status status;
    for (size_t attempt = 0; attempt < 2 * replicas_.size(); ++attempt) {
      const size_t index = current_.load();
      status = call(*replicas_[index]);
      if (status.ok()) return status;
      status = Redirect(index, status);
      if (!absl::IsUnavailable(status)) return status;
    }
    return status;
  }

  std::vector<std::unique_ptr<ShardClient>> replicas_;
  std::string address_;
  std::atomic<size_t> current_{0};
};

}  // namespace

std::unique_ptr<ShardClient> CreateReplicaGroupShardClient(
    std::vector<std::unique_ptr<ShardClient>> replicas) {
  return std::make_unique<ReplicaGroupShardClient>(std::move(replicas));
}

}  // namespace strata
