#include "serving/follower_set.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace {

constexpr char kComponent[] = "follow";
constexpr absl::Duration kMapReadTimeout = absl::Seconds(1);

}  // namespace

FollowerSet::FollowerSet(const FollowerSetOptions& options,
                         const std::vector<std::string>& addresses)
    : options_(options) {
  absl::MutexLock lock(&mu_);
  const uint32_t count = static_cast<uint32_t>(addresses.size());
  for (uint32_t i = 0; i < count; ++i) {
    followers_.push_back(MakeFollower(i, count, addresses[i]));
  }
}

FollowerSet::~FollowerSet() { Stop(); }

std::unique_ptr<ShardFollower> FollowerSet::MakeFollower(
    uint32_t index, uint32_t count, const std::string& address) {
  ShardFollowerOptions follower = options_.follower;
  follower.shard_index = index;
  follower.num_shards = count;
  follower.address = address;
  return std::make_unique<ShardFollower>(follower);
}

void FollowerSet::Start() {
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
    for (auto& follower : followers_) follower->Start();
  }
  if (options_.map_check_interval > absl::ZeroDuration()) {
    checker_.emplace(options_.map_check_interval,
                     [this] { CheckShardMap().IgnoreError(); });
  }
}

void FollowerSet::Stop() {
  checker_.reset();
  std::vector<std::unique_ptr<ShardFollower>> stopping;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    for (auto& follower : followers_) stopping.push_back(std::move(follower));
    for (Retiring& r : retiring_) stopping.push_back(std::move(r.follower));
    followers_.clear();
    retiring_.clear();
  }
  for (auto& follower : stopping) follower->Stop();
}

std::vector<FollowState> FollowerSet::states() const {
  absl::MutexLock lock(&mu_);
  std::vector<FollowState> states;
  for (const auto& follower : followers_) {
    states.push_back(follower->state());
    if (!count_error_.empty() && states.back().last_error.empty()) {
      states.back().last_error = count_error_;
    }
  }
  for (const Retiring& r : retiring_) states.push_back(r.follower->state());
  return states;
}

absl::Status FollowerSet::CheckShardMap() {
  absl::StatusOr<v1::ShardMap> map = NewestMap();
  {
    // A failure is logged once, not every interval.
    absl::MutexLock lock(&mu_);
    const std::string error = map.ok() ? "" : map.status().ToString();
    if (!error.empty() && error != check_error_) {
      STRATA_LOG(WARNING, kComponent)
          << "cannot read the training shards' shard map (a grow or shrink "
             "of the cluster goes unseen until it can): "
          << error;
    }
    check_error_ = error;
  }
  if (map.ok()) Follow(*map);
  RetireCaughtUp();
  return map.status();
}

std::shared_ptr<grpc::Channel> FollowerSet::ChannelTo(
    const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) {
    channel =
        grpc::CreateChannel(address, options_.follower.credentials
                                         ? options_.follower.credentials
                                         : grpc::InsecureChannelCredentials());
  }
  return channel;
}

// Asks each followed shard (any of its replicas) for its map: the shards
// install a new map one after the other, so the highest version is taken.
absl::StatusOr<v1::ShardMap> FollowerSet::NewestMap() {
  std::vector<std::string> addresses;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& follower : followers_) {
      addresses.push_back(follower->state().address);
    }
  }
  std::optional<v1::ShardMap> newest;
  absl::Status last_error = absl::UnavailableError("no shard followed");
  for (const std::string& shard : addresses) {
    for (absl::string_view replica : absl::StrSplit(shard, '|')) {
      auto stub = v1::ParameterServer::NewStub(ChannelTo(std::string(replica)));
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           absl::ToChronoMilliseconds(kMapReadTimeout));
      AddBearerToken(options_.follower.auth_token, context);
      v1::ShardMap map;
      const grpc::Status status =
          stub->GetShardMap(&context, v1::GetShardMapRequest(), &map);
      if (!status.ok()) {
        last_error = FromGrpcStatus(status);
        continue;
      }
      if (!newest || map.version() > newest->version()) newest = map;
      break;
    }
  }
  if (!newest) return last_error;
  return *std::move(newest);
}

void FollowerSet::Follow(const v1::ShardMap& map) {
  const uint32_t count = map.num_shards();
  absl::MutexLock lock(&mu_);
  if (stopped_ || count == 0 || map.version() < applied_version_) return;
  applied_version_ = map.version();
  if (count == followers_.size()) {
    count_error_.clear();
    return;
  }
  if (map.shard_addresses_size() != static_cast<int>(count)) {
    count_error_ = absl::StrCat(
        "the training cluster's shard map (version ", map.version(), ") has ",
        count, " shards, but ", followers_.size(),
        " are followed and the map names no addresses: restart "
        "strata-serving with --shards listing all ",
        count);
    if (reported_version_ != map.version()) {
      reported_version_ = map.version();
      STRATA_LOG(ERROR, kComponent) << count_error_;
    }
    return;
  }
  count_error_.clear();
  const absl::Time now = options_.follower.clock->Now();
  while (followers_.size() > count) {
    STRATA_LOG(INFO, kComponent)
        << "shard " << followers_.size() - 1
        << " left the training cluster (shard map version " << map.version()
        << "): followed until its stream caught up";
    retiring_.push_back({std::move(followers_.back()), now});
    followers_.pop_back();
  }
  for (uint32_t i = static_cast<uint32_t>(followers_.size()); i < count; ++i) {
    STRATA_LOG(INFO, kComponent)
        << "shard " << i << " (" << map.shard_addresses(i)
        << ") joined the training cluster (shard map version " << map.version()
        << "): following it";
    // A shard being retired that comes back (a shrink, then a grow) keeps
    // its follower: two would write the same shard's position.
    auto retiring = std::find_if(retiring_.begin(), retiring_.end(),
                                 [i](const Retiring& r) {
                                   return r.follower->state().shard_index == i;
                                 });
    if (retiring != retiring_.end()) {
      if (retiring->follower->state().address == map.shard_addresses(i)) {
        followers_.push_back(std::move(retiring->follower));
        retiring_.erase(retiring);
        continue;
      }
      retiring->follower->Stop();
      retiring_.erase(retiring);
    }
    followers_.push_back(MakeFollower(i, count, map.shard_addresses(i)));
    if (started_) followers_.back()->Start();
  }
}

void FollowerSet::RetireCaughtUp() {
  std::vector<std::unique_ptr<ShardFollower>> done;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.follower.clock->Now();
    for (auto it = retiring_.begin(); it != retiring_.end();) {
      // Caught up with what the shard said after it left the map (its
      // heartbeats carry its latest sequence), not with what it said before.
      const FollowState state = it->follower->state();
      const bool caught_up = state.connected && state.last_heard > it->since &&
                             state.applied_sequence >= state.latest_sequence;
      if (caught_up || now - it->since >= options_.retire_deadline) {
        STRATA_LOG(INFO, kComponent)
            << "stopped following shard " << state.shard_index << " ("
            << state.address << "): "
            << (caught_up ? "caught up" : "its stream did not catch up");
        done.push_back(std::move(it->follower));
        it = retiring_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& follower : done) follower->Stop();
}

}  // namespace strata
