#ifndef STRATA_SERVER_REPLICATION_REPLICA_GROUP_H_
#define STRATA_SERVER_REPLICATION_REPLICA_GROUP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordination/etcd_client.h"
#include "embedding/embedding_store.h"
#include "proto/replication.pb.h"
#include "proto/strata.pb.h"
#include "server/replication/replication_log.h"

namespace grpc {
template <class R>
class ServerReaderInterface;
}  // namespace grpc

namespace strata {

class ReplicaSender;

// When a replicated push is acknowledged.
enum class AckMode {
  // Once write_quorum replicas (the primary included) have it durable in
  // their durability mode: survives the loss of replicas - write_quorum.
  kReplicated,
  // Once the primary has it; followers catch up. A failover loses the
  // pushes the new primary had not received (reported in its log).
  kAsync,
};

absl::StatusOr<AckMode> ParseAckMode(absl::string_view name);
absl::string_view AckModeName(AckMode mode);

struct ReplicaGroupOptions {
  // The replica's store; not owned. Its durability must be sync or group
  // (the replication position is written with each push).
  EmbeddingStore* store = nullptr;
  // The store's data_dir: snapshots arrive in its checkpoints/.
  std::string data_dir;
  // etcd; not owned. Required.
  EtcdClient* etcd = nullptr;
  // Keys live under /<cluster>/shards/<shard_index>/. Default: "strata".
  std::string cluster = "strata";
  uint32_t shard_index = 0;
  // This replica's name in the group: unique, stable across restarts;
  // letters, digits, '_', '-' and '.'. Required.
  std::string replica_id;
  // R, the group's size, and W (0: a majority of R).
  int replicas = 3;
  int write_quorum = 0;
  AckMode ack_mode = AckMode::kReplicated;
  // The primary's etcd lease: a primary that cannot renew it for this long
  // is replaced. Default: 3 s.
  absl::Duration lease_ttl = absl::Seconds(3);
  // How long a push waits for its acknowledgements before it fails with
  // UNAVAILABLE (it may still be applied; a retry is deduplicated).
  // Default: 10 s.
  absl::Duration replication_timeout = absl::Seconds(10);
  // Entries kept in memory for followers that fall behind; past them a
  // follower gets a snapshot. Default: 256 MiB.
  size_t log_bytes = size_t{256} << 20;
  // Sent as a bearer token on replication calls (the shards' --auth_token).
  std::string auth_token;
  // Default: Clock::Real().
  Clock* clock = Clock::Real();
};

// What Stats and /metrics report.
struct ReplicaGroupStatus {
  std::string replica_id;
  bool primary = false;
  uint64_t term = 0;
  std::string primary_id;
  std::string primary_address;
  ReplicationPosition position;
  bool lease_valid = false;
  uint64_t failovers = 0;  // promotions of this replica since it started
  std::string ack_mode;
  int replicas = 0;
  std::map<std::string, uint64_t> follower_sequences;
};

// One replica of a shard index's replica group. It keeps a lease in etcd,
// registers itself under members/, campaigns for the leader key when no
// primary holds it (when it stands at least as far as every replica it can
// reach, and it reaches enough of them to see every acknowledged push), and
// as primary orders every write through the group's log, sends the log to
// each follower (ReplicaSender) and acknowledges per AckMode. A primary
// that cannot renew its lease stops acknowledging before the lease expires
// (fencing), and steps down when a follower reports a higher term.
// Thread-safe; Start() runs a background thread until destruction.
//
// Example (server/main.cc):
//   auto group = ReplicaGroup::Create(options);   // before the service
//   ... start the gRPC server with ShardService and ReplicationService ...
//   (*group)->Start("10.0.0.7:50051");           // campaigns or follows
class ReplicaGroup {
 public:
  using PushApplier = std::function<absl::StatusOr<bool>(const PushId&)>;

  // INVALID_ARGUMENT for bad options; errors reading the store's position.
  // A group that has not started answers like a follower without primary.
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Create(
      const ReplicaGroupOptions& options);
  // Starts following and campaigning; `address` (host:port) is where the
  // other replicas and clients reach this one. Call once.
  void Start(const std::string& address);
  // Steps down (deleting the leader key and revoking the lease, so that a
  // follower takes over at once) and stops the threads.
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  // OK on a primary whose lease is valid. FAILED_PRECONDITION naming the
  // primary on a follower; UNAVAILABLE while there is no primary or the
  // lease cannot be renewed.
  absl::Status CheckPrimary() const;

  // Primary: applies a push with `apply` in the group's order (under a
  // PushId carrying its position) and waits for the acknowledgements the
  // mode asks for. Returns what `apply` returned (duplicate).
  absl::StatusOr<bool> ReplicatePush(const v1::PushRequest& request,
                                     const PushApplier& apply);
  absl::StatusOr<bool> ReplicateCreateTable(
      const v1::TableConfig& config,
      const std::function<absl::StatusOr<bool>()>& create);
  // A bucket move's update (`entry` holds moved_rows or dropped_buckets; its
  // term and sequence are set here), applied with `apply` in the group's
  // order, its position recorded, then waited for like a push. Nothing is
  // logged when `apply` fails.
  absl::Status ReplicateMoveUpdate(v1::ReplicationEntry entry,
                                   const std::function<absl::Status()>& apply);
  // A restore replaces the store: the log starts over after it, so every
  // follower gets a snapshot of the restored rows.
  absl::StatusOr<CheckpointInfo> ReplicateRestore(
      const std::function<absl::StatusOr<CheckpointInfo>()>& restore);

  // Follower side of the Replication service.
  absl::StatusOr<v1::AppendResponse> HandleAppend(
      const v1::AppendRequest& request);
  absl::StatusOr<v1::InstallSnapshotResponse> HandleInstallSnapshot(
      grpc::ServerReaderInterface<v1::SnapshotChunk>* reader);
  v1::GetPositionResponse Position() const;

  ReplicaGroupStatus GetStatus() const;

  // Used by ReplicaSender on the primary.
  const ReplicaGroupOptions& options() const { return options_; }
  // Set by Start() before any thread reads it.
  const std::string& address() const { return address_; }
  ReplicationLog& log() { return log_; }
  bool IsPrimaryOf(uint64_t term) const;
  // A follower answered with a term above ours: step down.
  void ObserveTerm(uint64_t term);
  // Takes a checkpoint of the store at the log's last position, under the
  // write order, to send to `follower`; returns its directory and position.
  absl::StatusOr<std::pair<std::string, ReplicationPosition>> TakeSnapshot(
      uint64_t term, const std::string& follower);

 private:
  explicit ReplicaGroup(const ReplicaGroupOptions& options);

  void Run();
  void Tick();
  void RenewLease();
  void FollowOrCampaign();
  // The other replicas registered in etcd: id -> address.
  absl::StatusOr<std::map<std::string, std::string>> OtherMembers() const;
  void Campaign();
  void CheckLeadership();
  void BecomePrimary(uint64_t term);
  void StepDown(const char* why);
  void SyncSenders(bool primary);
  absl::Status WaitForQuorum(uint64_t term, uint64_t sequence);
  // Applies a write that is not a push with `apply` in the group's order;
  // when it returns true (it changed the store), records its position and
  // logs `entry` (its term and sequence set here). Then waits for the
  // acknowledgements the mode asks for. Returns what `apply` returned.
  absl::StatusOr<bool> ReplicateUpdate(
      v1::ReplicationEntry entry,
      const std::function<absl::StatusOr<bool>()>& apply);
  absl::Status ApplyEntry(const v1::ReplicationEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);

  std::string Key(absl::string_view name) const;
  int needed_follower_acks() const;

  const ReplicaGroupOptions options_;
  std::string address_;
  ReplicationLog log_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  // Held while a write is ordered and applied (primary) or an entry or
  // snapshot is applied (follower): the store's state and log_.last()
  // always agree under it.
  absl::Mutex apply_mu_;

  mutable absl::Mutex mu_;
  bool primary_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t highest_term_ ABSL_GUARDED_BY(mu_) = 0;
  std::string primary_id_ ABSL_GUARDED_BY(mu_);
  std::string primary_address_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  // Writes are acknowledged only before this instant: the lease's expiry as
  // this replica can bound it, less a margin.
  absl::Time writable_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t failovers_ ABSL_GUARDED_BY(mu_) = 0;
  bool warned_no_quorum_ ABSL_GUARDED_BY(mu_) = false;

  // Only the background thread touches the senders.
  std::map<std::string, std::unique_ptr<ReplicaSender>> senders_;
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_REPLICA_GROUP_H_
