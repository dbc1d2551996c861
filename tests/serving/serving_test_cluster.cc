#include "tests/serving/serving_test_cluster.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace testing {
namespace {

// Reaction time of the waits below; each is bounded by its deadline.
constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

}  // namespace

v1::TableConfig SgdTable(const std::string& name, uint32_t dim) {
  v1::TableConfig config;
  config.set_name(name);
  config.set_dim(dim);
  config.set_seed(17);
  config.mutable_initializer()->set_type(v1::UNIFORM);
  config.mutable_initializer()->set_min(-0.5f);
  config.mutable_initializer()->set_max(0.5f);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

ServingTestCluster::ServingTestCluster(int num_shards,
                                       std::vector<std::string> shard_flags) {
  for (int i = 0; i < num_shards; ++i) {
    ServerProcessOptions options;
    options.flags = {absl::StrCat("--num_shards=", num_shards),
                     absl::StrCat("--shard_index=", i), "--durability=group"};
    options.flags.insert(options.flags.end(), shard_flags.begin(),
                         shard_flags.end());
    shards_.push_back(std::make_unique<ServerProcess>(options));
  }
}

std::string ServingTestCluster::ShardList() const {
  std::vector<std::string> addresses;
  for (const auto& shard : shards_) addresses.push_back(shard->address());
  return absl::StrJoin(addresses, ",");
}

absl::Status ServingTestCluster::StartTraining() {
  for (auto& shard : shards_) {
    if (absl::Status started = shard->Start(); !started.ok()) return started;
  }
  PsClientOptions options;
  for (auto& shard : shards_)
    options.shard_addresses.push_back(shard->address());
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(options);
  if (!client.ok()) return client.status();
  training_ = *std::move(client);
  return absl::OkStatus();
}

absl::Status ServingTestCluster::StartServing(std::vector<std::string> flags) {
  const bool listed = std::any_of(flags.begin(), flags.end(), [](auto& f) {
    return absl::StartsWith(f, "--checkpoint_dirs=") ||
           absl::StartsWith(f, "--shards=");
  });
  if (!listed) flags.push_back("--shards=" + ShardList());
  ServerProcessOptions options;
  options.binary = "strata-serving";
  options.flags = std::move(flags);
  serving_ = std::make_unique<ServerProcess>(options);
  if (absl::Status started = serving_->Start(); !started.ok()) return started;
  ServingClientOptions client_options;
  client_options.endpoints = {serving_->address()};
  absl::StatusOr<std::unique_ptr<ServingClient>> client =
      ServingClient::Create(client_options);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StreamPosition>>
ServingTestCluster::TrainingPositions() {
  std::vector<StreamPosition> positions;
  for (auto& shard : shards_) {
    auto stub = v1::ParameterServer::NewStub(grpc::CreateChannel(
        shard->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    auto reader = stub->Subscribe(&context, v1::SubscribeRequest());
    v1::ChangeBatch batch;
    const bool read = reader->Read(&batch);
    context.TryCancel();
    const grpc::Status finished = reader->Finish();
    if (!read) {
      return absl::UnavailableError(absl::StrCat("no change batch from ",
                                                 shard->address(), ": ",
                                                 finished.error_message()));
    }
    positions.push_back({batch.incarnation(),
                         std::max(batch.sequence(), batch.latest_sequence())});
  }
  return positions;
}

absl::StatusOr<v1::ServingStatusResponse> ServingTestCluster::WaitForStatus(
    const std::function<bool(const v1::ServingStatusResponse&)>& done,
    absl::Duration deadline) {
  const absl::Time give_up = absl::Now() + deadline;
  while (true) {
    absl::StatusOr<v1::ServingStatusResponse> status = client_->Status();
    if (status.ok() && done(*status)) return status;
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "serving's Status did not reach the expected state within ",
          absl::FormatDuration(deadline), "; last: ",
          status.ok() ? status->ShortDebugString()
                      : status.status().ToString()));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::StatusOr<v1::ServingStatusResponse> ServingTestCluster::WaitUntilCaughtUp(
    absl::Duration deadline) {
  absl::StatusOr<std::vector<StreamPosition>> targets = TrainingPositions();
  if (!targets.ok()) return targets.status();
  return WaitForStatus(
      [&](const v1::ServingStatusResponse& status) {
        if (status.shards_size() != static_cast<int>(targets->size())) {
          return false;
        }
        for (const v1::FollowedShard& shard : status.shards()) {
          const StreamPosition& target = (*targets)[shard.shard_index()];
          if (shard.incarnation() != target.incarnation ||
              shard.applied_sequence() < target.sequence) {
            return false;
          }
        }
        return true;
      },
      deadline);
}

absl::StatusOr<std::vector<float>> ServingTestCluster::Pull(
    const std::string& table, const std::vector<uint64_t>& keys, uint32_t dim) {
  std::vector<float> rows(keys.size() * dim);
  absl::Status pulled = training_->Pull(table, keys, absl::MakeSpan(rows));
  if (!pulled.ok()) return pulled;
  return rows;
}

absl::StatusOr<std::vector<float>> ServingTestCluster::Lookup(
    const std::string& table, const std::vector<uint64_t>& keys, uint32_t dim) {
  std::vector<float> rows(keys.size() * dim);
  absl::Status found = client_->Lookup(table, keys, absl::MakeSpan(rows));
  if (!found.ok()) return found;
  return rows;
}

}  // namespace testing
}  // namespace strata
