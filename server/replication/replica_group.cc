#include "server/replication/replica_group.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/auth.h"
#include "common/logging.h"
#include "common/primary_redirect.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/replication.grpc.pb.h"
#include "server/replication/position_proto.h"
#include "server/replication/replica_sender.h"

namespace strata {
namespace {

// Writes stop this long before the lease can have expired in etcd, for the
// clock rates of two machines and the time a write takes to be answered.
absl::Duration LeaseMargin(absl::Duration ttl) {
  return std::max(absl::Milliseconds(200), ttl / 5);
}

}  // namespace

absl::StatusOr<AckMode> ParseAckMode(absl::string_view name) {
  if (name == "replicated") return AckMode::kReplicated;
  if (name == "async") return AckMode::kAsync;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown acknowledgement mode '", name, "' (replicated or async)"));
}

absl::string_view AckModeName(AckMode mode) {
  return mode == AckMode::kReplicated ? "replicated" : "async";
}

ReplicaGroup::ReplicaGroup(const ReplicaGroupOptions& options)
    : options_(options), log_(options.log_bytes) {}

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Create(
    const ReplicaGroupOptions& options) {
  if (options.store == nullptr || options.etcd == nullptr) {
    return absl::InvalidArgumentError("a replica group needs a store and etcd");
  }
  if (options.replica_id.empty() || options.replica_id.size() > 64 ||
      options.replica_id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHI"
                                           "JKLMNOPQRSTUVWXYZ0123456789_-.") !=
          std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replica_id '", options.replica_id,
                     "' must be 1 to 64 letters, digits, '_', '-' or '.'"));
  }
  if (options.replicas < 1 || options.replicas > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas is ", options.replicas, "; a group has 1, 2 or 3"));
  }
  if (options.write_quorum < 0 || options.write_quorum > options.replicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("--write_quorum is ", options.write_quorum,
                     "; it must be between 1 and --replicas (",
                     options.replicas, "), or 0 for a majority"));
  }
  if (options.store->durability() == Durability::kPeriodic) {
    return absl::InvalidArgumentError(
        "a replicated shard needs --durability=sync or group: periodic "
        "durability does not record how far a replica got");
  }
  std::unique_ptr<ReplicaGroup> group(new ReplicaGroup(options));
  STRATA_ASSIGN_OR_RETURN(ReplicationPosition position,
                          options.store->ReadReplicationPosition());
  group->log_.Reset(position);
  STRATA_LOG(INFO, "replication")
      << "replica " << options.replica_id << " of shard " << options.shard_index
      << " starts as a follower at term " << position.term << ", sequence "
      << position.sequence << " (" << AckModeName(options.ack_mode) << ", "
      << options.replicas << " replicas)";
  return group;
}

void ReplicaGroup::Start(const std::string& address) {
  address_ = address;
  thread_ = std::thread([this] { Run(); });
}

ReplicaGroup::~ReplicaGroup() {
  stopping_.store(true);
  if (thread_.joinable()) thread_.join();
  senders_.clear();
  uint64_t term = 0;
  int64_t lease = 0;
  {
    absl::MutexLock lock(&mu_);
    if (primary_) term = term_;
    primary_ = false;
    lease = lease_;
  }
  log_.StartTerm(0);
  // Handing over at once instead of after the lease's TTL.
  if (term != 0) {
    options_.etcd->DeleteIfCreatedAt(Key("leader"), term).IgnoreError();
  }
  if (lease != 0) options_.etcd->RevokeLease(lease).IgnoreError();
}

std::string ReplicaGroup::Key(absl::string_view name) const {
  return absl::StrCat("/", options_.cluster, "/shards/", options_.shard_index,
                      "/", name);
}

int ReplicaGroup::needed_follower_acks() const {
  if (options_.ack_mode == AckMode::kAsync) return 0;
  const int quorum = options_.write_quorum > 0 ? options_.write_quorum
                                               : options_.replicas / 2 + 1;
  return quorum - 1;
}

void ReplicaGroup::Run() {
  const absl::Duration tick =
      std::max(absl::Milliseconds(50), options_.lease_ttl / 6);
  while (!stopping_.load()) {
    Tick();
    // Short sleeps, so that shutting down does not wait a whole tick.
    for (absl::Duration slept; slept < tick && !stopping_.load();
         slept += absl::Milliseconds(20)) {
      options_.clock->SleepFor(absl::Milliseconds(20));
    }
  }
}

void ReplicaGroup::Tick() {
  RenewLease();
  bool primary;
  {
    absl::MutexLock lock(&mu_);
    primary = primary_;
  }
  if (primary) {
    CheckLeadership();
  } else {
    FollowOrCampaign();
  }
  {
    absl::MutexLock lock(&mu_);
    primary = primary_;
  }
  // Not under mu_: a sender's destructor waits for its thread, which takes
  // it.
  SyncSenders(primary);
}

void ReplicaGroup::RenewLease() {
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  const absl::Time before = options_.clock->Now();
  const absl::Duration margin = LeaseMargin(options_.lease_ttl);
  if (lease == 0) {
    absl::StatusOr<int64_t> granted =
        options_.etcd->GrantLease(options_.lease_ttl);
    if (!granted.ok()) return;
    absl::Status put =
        options_.etcd
            ->Put(Key(absl::StrCat("members/", options_.replica_id)), address_,
                  *granted)
            .status();
    if (!put.ok()) {
      options_.etcd->RevokeLease(*granted).IgnoreError();
      return;
    }
    absl::MutexLock lock(&mu_);
    lease_ = *granted;
    writable_until_ = before + options_.lease_ttl - margin;
    return;
  }
  absl::StatusOr<absl::Duration> ttl = options_.etcd->KeepAlive(lease);
  if (ttl.ok()) {
    absl::MutexLock lock(&mu_);
    writable_until_ = before + *ttl - margin;
    return;
  }
  if (absl::IsNotFound(ttl.status())) {
    {
      absl::MutexLock lock(&mu_);
      lease_ = 0;
      writable_until_ = absl::InfinitePast();
    }
    StepDown("its etcd lease expired");
  }
}

void ReplicaGroup::CheckLeadership() {
  uint64_t term;
  {
    absl::MutexLock lock(&mu_);
    term = term_;
  }
  absl::StatusOr<std::optional<EtcdKeyValue>> leader =
      options_.etcd->Get(Key("leader"));
  if (!leader.ok()) return;  // the lease's validity decides meanwhile
  if (!leader->has_value() ||
      static_cast<uint64_t>((*leader)->create_revision) != term) {
    StepDown("the leader key in etcd is no longer its own");
  }
}

void ReplicaGroup::FollowOrCampaign() {
  absl::StatusOr<std::optional<EtcdKeyValue>> leader =
      options_.etcd->Get(Key("leader"));
  if (!leader.ok()) return;
  if (!leader->has_value()) {
    Campaign();
    return;
  }
  const EtcdKeyValue& kv = **leader;
  std::vector<std::string> parts = absl::StrSplit(kv.value, '\n');
  if (parts.size() != 2) return;
  if (parts[0] == options_.replica_id) {
    // Left by this replica's previous run, whose lease has not expired yet:
    // nobody writes under it, so it can go now.
    options_.etcd->DeleteIfCreatedAt(Key("leader"), kv.create_revision)
        .IgnoreError();
    return;
  }
  absl::MutexLock lock(&mu_);
  primary_id_ = parts[0];
  primary_address_ = parts[1];
  highest_term_ =
      std::max(highest_term_, static_cast<uint64_t>(kv.create_revision));
}

absl::StatusOr<std::map<std::string, std::string>> ReplicaGroup::OtherMembers()
    const {
  STRATA_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> members,
                          options_.etcd->GetPrefix(Key("members/")));
  std::map<std::string, std::string> others;
  for (const EtcdKeyValue& member : members) {
    const std::string id = member.key.substr(member.key.rfind('/') + 1);
    if (id != options_.replica_id) others[id] = member.value;
  }
  return others;
}

void ReplicaGroup::Campaign() {
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  if (lease == 0) return;
  absl::StatusOr<std::map<std::string, std::string>> others = OtherMembers();
  if (!others.ok()) return;
  const ReplicationPosition mine = log_.last();
  int reached = 1;  // this replica
  for (const auto& [id, address] : *others) {
    auto stub = v1::Replication::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(500));
    AddBearerToken(options_.auth_token, context);
    v1::GetPositionResponse answer;
    if (!stub->GetPosition(&context, v1::GetPositionRequest(), &answer).ok()) {
      continue;
    }
    ++reached;
    const ReplicationPosition theirs = PositionFromProto(answer.position());
    // The replica that stands furthest (ties: the smaller id) campaigns.
    if (answer.role() == "primary" || mine < theirs ||
        (theirs == mine && answer.replica_id() < options_.replica_id)) {
      return;
    }
  }
  // Every acknowledged push is on write_quorum replicas; reaching
  // replicas - write_quorum + 1 of them (this one included) means one of
  // them has it, and this replica stands at least as far as that one.
  const int needed = options_.replicas - (needed_follower_acks() + 1) + 1;
  if (reached < needed) {
    absl::MutexLock lock(&mu_);
    if (!warned_no_quorum_) {
      STRATA_LOG(WARNING, "replication")
          << "shard " << options_.shard_index << " has no primary, and "
          << "replica " << options_.replica_id << " reaches " << reached
          << " of the " << needed << " replicas it must compare with "
          << "before it may take over";
      warned_no_quorum_ = true;
    }
    return;
  }
  absl::StatusOr<std::optional<int64_t>> won = options_.etcd->CreateIfAbsent(
      Key("leader"), absl::StrCat(options_.replica_id, "\n", address_), lease);
  if (won.ok() && won->has_value()) {
    BecomePrimary(static_cast<uint64_t>(**won));
  }
}

void ReplicaGroup::BecomePrimary(uint64_t term) {
  absl::MutexLock order(&apply_mu_);
  {
    absl::MutexLock lock(&mu_);
    primary_ = true;
    term_ = term;
    highest_term_ = std::max(highest_term_, term);
    primary_id_ = options_.replica_id;
    primary_address_ = address_;
    warned_no_quorum_ = false;
    ++failovers_;
  }
  log_.StartTerm(term);
  const ReplicationPosition at = log_.last();
  STRATA_LOG(INFO, "replication")
      << "replica " << options_.replica_id << " is now the primary of shard "
      << options_.shard_index << " (term " << term << ", from sequence "
      << at.sequence << " of term " << at.term << ")";
}

void ReplicaGroup::StepDown(const char* why) {
  uint64_t term;
  {
    absl::MutexLock lock(&mu_);
    if (!primary_) return;
    primary_ = false;
    term = term_;
    // Until the next primary is known, this replica names none.
    primary_id_.clear();
    primary_address_.clear();
  }
  log_.StartTerm(0);  // pushes waiting for acknowledgements give up
  options_.etcd->DeleteIfCreatedAt(Key("leader"), term).IgnoreError();
  STRATA_LOG(WARNING, "replication")
      << "replica " << options_.replica_id << " steps down as primary of "
      << "shard " << options_.shard_index << " (term " << term << "): " << why;
}

void ReplicaGroup::ObserveTerm(uint64_t term) {
  bool deposed;
  {
    absl::MutexLock lock(&mu_);
    highest_term_ = std::max(highest_term_, term);
    deposed = primary_ && term > term_;
  }
  if (deposed) StepDown("a follower has seen a newer primary");
}

bool ReplicaGroup::IsPrimaryOf(uint64_t term) const {
  absl::MutexLock lock(&mu_);
  return primary_ && term_ == term;
}

void ReplicaGroup::SyncSenders(bool primary) {
  if (!primary) {
    senders_.clear();
    return;
  }
  uint64_t term;
  {
    absl::MutexLock lock(&mu_);
    term = term_;
  }
  absl::StatusOr<std::map<std::string, std::string>> wanted = OtherMembers();
  if (!wanted.ok()) return;
  for (auto it = senders_.begin(); it != senders_.end();) {
    auto found = wanted->find(it->first);
    if (found == wanted->end() || found->second != it->second->address() ||
        it->second->term() != term) {
      it = senders_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [id, address] : *wanted) {
    if (senders_.count(id) == 0) {
      senders_[id] = std::make_unique<ReplicaSender>(this, term, id, address);
    }
  }
}

absl::Status ReplicaGroup::CheckPrimary() const {
  absl::MutexLock lock(&mu_);
  if (primary_) {
    if (options_.clock->Now() < writable_until_) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        "replica ", options_.replica_id, ", primary of shard ",
        options_.shard_index,
        ", cannot renew its etcd lease and acknowledges no write until it "
        "does or a follower takes over"));
  }
  if (!primary_address_.empty() && primary_id_ != options_.replica_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", options_.replica_id, " of shard ", options_.shard_index,
        " is not the primary",
        PrimaryRedirectText(
            primary_address_,
            absl::StrCat("replica ", primary_id_, ", term ", highest_term_))));
  }
  return absl::UnavailableError(
      absl::StrCat("shard ", options_.shard_index, " has no primary yet (",
                   "replica ", options_.replica_id, " is a follower)"));
}

absl::Status ReplicaGroup::WaitForQuorum(uint64_t term, uint64_t sequence) {
  const int needed = needed_follower_acks();
  if (needed > 0 &&
      !log_.WaitForAcks(term, sequence, needed,
                        options_.clock->Now() + options_.replication_timeout)) {
    return absl::UnavailableError(
        absl::StrCat("update ", sequence, " is on the primary of shard ",
                     options_.shard_index, " but not on ", needed + 1,
                     " of its ", options_.replicas, " replicas within ",
                     absl::FormatDuration(options_.replication_timeout),
                     "; retry it (a retried push is not applied twice)"));
  }
  // Fencing: acknowledged only while the lease that made this replica
  // primary is certainly still held.
  if (!IsPrimaryOf(term)) {
    return absl::UnavailableError(absl::StrCat(
        "replica ", options_.replica_id, " lost the primary role of shard ",
        options_.shard_index, " before update ", sequence,
        " was acknowledged; retry it"));
  }
  return CheckPrimary();
}

absl::StatusOr<bool> ReplicaGroup::ReplicatePush(const v1::PushRequest& request,
                                                 const PushApplier& apply) {
  uint64_t term, sequence;
  bool duplicate;
  {
    absl::MutexLock order(&apply_mu_);
    STRATA_RETURN_IF_ERROR(CheckPrimary());
    {
      absl::MutexLock lock(&mu_);
      term = term_;
    }
    const ReplicationPosition next{term, log_.last().sequence + 1};
    STRATA_ASSIGN_OR_RETURN(duplicate, apply(PushId{request.client_id(),
                                                    request.sequence(), next}));
    if (duplicate) {
      // Its first application may still wait for acknowledgements: this
      // answer waits for everything before it.
      sequence = log_.last().sequence;
    } else {
      auto entry = std::make_shared<v1::ReplicationEntry>();
      entry->set_term(term);
      entry->set_sequence(next.sequence);
      *entry->mutable_push() = request;
      log_.Append(std::move(entry));
      sequence = next.sequence;
    }
  }
  STRATA_RETURN_IF_ERROR(WaitForQuorum(term, sequence));
  return duplicate;
}

absl::StatusOr<bool> ReplicaGroup::ReplicateCreateTable(
    const v1::TableConfig& config,
    const std::function<absl::StatusOr<bool>()>& create) {
  v1::ReplicationEntry entry;
  *entry.mutable_create_table() = config;
  return ReplicateUpdate(std::move(entry), create);
}

absl::Status ReplicaGroup::ReplicateMoveUpdate(
    v1::ReplicationEntry entry, const std::function<absl::Status()>& apply) {
  return ReplicateUpdate(std::move(entry),
                         [&]() -> absl::StatusOr<bool> {
                           STRATA_RETURN_IF_ERROR(apply());
                           return true;
                         })
      .status();
}

absl::StatusOr<bool> ReplicaGroup::ReplicateUpdate(
    v1::ReplicationEntry entry,
    const std::function<absl::StatusOr<bool>()>& apply) {
  uint64_t term, sequence;
  bool changed;
  {
    absl::MutexLock order(&apply_mu_);
    STRATA_RETURN_IF_ERROR(CheckPrimary());
    {
      absl::MutexLock lock(&mu_);
      term = term_;
    }
    STRATA_ASSIGN_OR_RETURN(changed, apply());
    sequence = log_.last().sequence;
    if (changed) {
      ++sequence;
      // Recorded after the update. A follower that dies between the two
      // replays the entry, applying it again: a table creation and a
      // move's rows written or dropped are the same the second time
      // (nothing after it was applied yet). A primary that dies there
      // never logged it: a move's rows it wrote or dropped are of buckets
      // its shard does not own, which the next move of them drops first.
      STRATA_RETURN_IF_ERROR(options_.store->RecordReplicationPosition(
          ReplicationPosition{term, sequence}));
      entry.set_term(term);
      entry.set_sequence(sequence);
      log_.Append(std::make_shared<v1::ReplicationEntry>(std::move(entry)));
    }
  }
  // An update that changed nothing waits for everything before it.
  STRATA_RETURN_IF_ERROR(WaitForQuorum(term, sequence));
  return changed;
}

absl::StatusOr<CheckpointInfo> ReplicaGroup::ReplicateRestore(
    const std::function<absl::StatusOr<CheckpointInfo>()>& restore) {
  absl::MutexLock order(&apply_mu_);
  STRATA_RETURN_IF_ERROR(CheckPrimary());
  uint64_t term;
  {
    absl::MutexLock lock(&mu_);
    term = term_;
  }
  STRATA_ASSIGN_OR_RETURN(CheckpointInfo info, restore());
  const ReplicationPosition after{term, log_.last().sequence + 1};
  STRATA_RETURN_IF_ERROR(options_.store->RecordReplicationPosition(after));
  // No follower stands at `after`: each gets a snapshot of the restored
  // rows.
  log_.Reset(after);
  log_.StartTerm(term);
  STRATA_LOG(INFO, "replication")
      << "shard " << options_.shard_index << " restored checkpoint "
      << info.checkpoint_id << "; followers get a snapshot of it";
  return info;
}

v1::GetPositionResponse ReplicaGroup::Position() const {
  v1::GetPositionResponse response;
  response.set_replica_id(options_.replica_id);
  const ReplicationPosition position = log_.last();
  PositionToProto(position, response.mutable_position());
  absl::MutexLock lock(&mu_);
  response.set_role(primary_ ? "primary" : "follower");
  response.set_highest_term(highest_term_);
  return response;
}

ReplicaGroupStatus ReplicaGroup::GetStatus() const {
  ReplicaGroupStatus status;
  status.replica_id = options_.replica_id;
  status.position = log_.last();
  status.ack_mode = std::string(AckModeName(options_.ack_mode));
  status.replicas = options_.replicas;
  absl::MutexLock lock(&mu_);
  status.primary = primary_;
  status.term = primary_ ? term_ : highest_term_;
  status.primary_id = primary_id_;
  status.primary_address = primary_address_;
  status.lease_valid = options_.clock->Now() < writable_until_;
  status.failovers = failovers_;
  if (primary_) status.follower_sequences = log_.acknowledged();
  return status;
}

}  // namespace strata
