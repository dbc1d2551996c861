#include "common/cluster_file.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kCluster[] = R"(
version: 1
shards:
  addresses: [127.0.0.1:50051, "127.0.0.1:50052"]
  flags:
    durability: periodic
    data_dir: shard-{index}
  member_flags:
    - {metrics_port: 9090}
serving:
  addresses: [127.0.0.1:50061]
  flags: {data_dir: serving, unknown_keys: initializer}
workers:
  count: 3
  flags:
    train_files: [data/a, data/b]
    result_file: result-{index}.json
  member_flags:
    - {}
    - {metrics_port: 9201}
)";

ClusterFile Parse(const std::string& text) {
  absl::StatusOr<ClusterFile> cluster = ParseClusterFile(text, "c.yaml");
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *cluster : ClusterFile();
}

TEST(ClusterFileTest, ParsesEveryGroup) {
  const ClusterFile cluster = Parse(kCluster);
  EXPECT_THAT(cluster.shards.addresses,
              ElementsAre("127.0.0.1:50051", "127.0.0.1:50052"));
  EXPECT_EQ(cluster.shards.count, 2);
  EXPECT_EQ(cluster.serving.count, 1);
  EXPECT_EQ(cluster.workers.count, 3);
  EXPECT_TRUE(cluster.workers.addresses.empty());
  EXPECT_EQ(cluster.workers.member_flags.size(), 2u);
}

TEST(ClusterFileTest, ShardGetsCountPortGroupAndOwnFlagsInThatOrder) {
  const ClusterFile cluster = Parse(kCluster);
  EXPECT_THAT(ClusterFlagsFor(cluster, ClusterRole::kShard, 0),
              IsOkAndHolds(ElementsAre(
                  "--num_shards=2", "--port=50051", "--durability=periodic",
                  "--data_dir=shard-0", "--metrics_port=9090")));
  // Shard 1 has no member flags of its own.
  EXPECT_THAT(
      ClusterFlagsFor(cluster, ClusterRole::kShard, 1),
      IsOkAndHolds(ElementsAre("--num_shards=2", "--port=50052",
                               "--durability=periodic", "--data_dir=shard-1")));
}

constexpr char kReplicated[] = R"(
version: 1
etcd: {endpoints: [127.0.0.1:2379, 127.0.0.1:2479]}
shards:
  addresses:
    - [127.0.0.1:50051, 127.0.0.1:50053]
    - [127.0.0.1:50052, 127.0.0.1:50054]
  flags: {data_dir: "shard-{index}-r{replica}"}
workers:
  count: 1
)";

TEST(ClusterFileTest, ReplicatedShardGetsItsReplicasPortIdAndEtcd) {
  const ClusterFile cluster = Parse(kReplicated);
  EXPECT_THAT(
      ClusterFlagsFor(cluster, ClusterRole::kShard, 1, 1),
      IsOkAndHolds(ElementsAre("--num_shards=2", "--port=50054",
                               "--etcd_endpoints=127.0.0.1:2379,127.0.0.1:2479",
                               "--replicas=2", "--replica_id=r1",
                               "--advertise_address=127.0.0.1:50054",
                               "--data_dir=shard-1-r1")));
  EXPECT_THAT(ClusterFlagsFor(cluster, ClusterRole::kShard, 0, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--replica_index=2")));
}

TEST(ClusterFileTest, ClientsGetAReplicatedShardAsItsReplicasJoined) {
  const ClusterFile cluster = Parse(kReplicated);
  EXPECT_THAT(ClusterFlagsFor(cluster, ClusterRole::kWorker, 0),
              IsOkAndHolds(::testing::Contains(
                  "--shards=127.0.0.1:50051|127.0.0.1:50053,"
                  "127.0.0.1:50052|127.0.0.1:50054")));
}

TEST(ClusterFileTest, ReplicasNeedEtcdAndTheSameCountPerShard) {
  EXPECT_THAT(ParseClusterFile(R"(
version: 1
shards: {addresses: [[h:1, h:2]]}
)",
                               "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("etcd.endpoints")));
  EXPECT_THAT(ParseClusterFile(R"(
version: 1
etcd: {endpoints: [h:9]}
shards: {addresses: [[h:1, h:2], [h:3]]}
)",
                               "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shards.addresses[1]")));
  EXPECT_THAT(ParseClusterFile(R"(
version: 1
etcd: {endpoints: [h:9]}
shards: {addresses: [[h:1, h:2, h:3, h:4]]}
)",
                               "c.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 to 3 replicas")));
}

TEST(ClusterFileTest, ServingFollowsEveryShard) {
  EXPECT_THAT(ClusterFlagsFor(Parse(kCluster), ClusterRole::kServing, 0),
              IsOkAndHolds(ElementsAre(
                  "--shards=127.0.0.1:50051,127.0.0.1:50052", "--port=50061",
                  "--data_dir=serving", "--unknown_keys=initializer")));
}

TEST(ClusterFileTest, WorkerJoinsListsAndSubstitutesItsRank) {
  EXPECT_THAT(ClusterFlagsFor(Parse(kCluster), ClusterRole::kWorker, 1),
              IsOkAndHolds(ElementsAre(
                  "--shards=127.0.0.1:50051,127.0.0.1:50052", "--num_workers=3",
                  "--train_files=data/a,data/b", "--result_file=result-1.json",
                  "--metrics_port=9201")));
}

TEST(ClusterFileTest, ClientGetsShardsAndServing) {
  EXPECT_THAT(
      ClusterFlagsFor(Parse(kCluster), ClusterRole::kClient, 0),
      IsOkAndHolds(ElementsAre("--shards=127.0.0.1:50051,127.0.0.1:50052",
                               "--serving=127.0.0.1:50061")));
}

TEST(ClusterFileTest, MemberOutsideTheFileIsNamed) {
  const ClusterFile cluster = Parse(kCluster);
  EXPECT_THAT(ClusterFlagsFor(cluster, ClusterRole::kShard, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--shard_index=2 but cluster file c.yaml "
                                 "names 2 shards")));
  EXPECT_THAT(
      ClusterFlagsFor(cluster, ClusterRole::kWorker, -1),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--rank=-1")));
  const ClusterFile no_serving =
      Parse("version: 1\nshards: {addresses: [h:1]}\n");
  EXPECT_THAT(ClusterFlagsFor(no_serving, ClusterRole::kServing, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no 'serving' section")));
  EXPECT_THAT(ClusterFlagsFor(no_serving, ClusterRole::kClient, 0),
              IsOkAndHolds(ElementsAre("--shards=h:1")));
}

struct BadFile {
  const char* text;
  const char* message;
};

TEST(ClusterFileTest, MalformedFilesNameTheField) {
  const BadFile cases[] = {
      {"shards: {addresses: [h:1]}", "version: must be 1"},
      {"version: 2\nshards: {addresses: [h:1]}", "version: must be 1"},
      {"version: 1", "shards: is required"},
      {"version: 1\nshards: {addresses: []}",
       "shards.addresses: must be a non-empty list"},
      {"version: 1\nshards: {addresses: [h]}",
       "shards.addresses[0]: 'h' is not host:port"},
      {"version: 1\nshards: {addresses: ['h:70000']}",
       "shards.addresses[0]: 'h:70000' is not host:port"},
      {"version: 1\nshards: {addresses: [h:1], flag: {}}",
       "shards.flag: unknown field"},
      {"version: 1\nshards: {addresses: [h:1], flags: [a]}",
       "shards.flags: must be a map"},
      {"version: 1\nshards: {addresses: [h:1], flags: {a: {b: c}}}",
       "shards.flags.a: must be a scalar or a list"},
      {"version: 1\nshards: {addresses: [h:1], flags: {'a b': c}}",
       "shards.flags: flag names are"},
      {"version: 1\nshards: {addresses: [h:1], flags: {cluster_file: x}}",
       "shards.flags.cluster_file: a cluster file cannot name another"},
      {"version: 1\nshards: {addresses: [h:1], member_flags: [{}, {}]}",
       "shards.member_flags: has 2 entries for 1 members"},
      {"version: 1\nshards: {addresses: [h:1]}\nserving: {addresses: "
       "[h:2, h:3]}",
       "serving.addresses: must hold exactly one address"},
      {"version: 1\nshards: {addresses: [h:1]}\nworkers: {count: 0}",
       "workers.count: must be an integer in 1.."},
      {"version: 1\nshards: {addresses: [h:1]}\nworkers: {addresses: [h:1]}",
       "workers.addresses: unknown field"},
      {"version: 1\nshard: {}", "(top level).shard: unknown field"},
      {"version: 1\nshards: [", "cluster file c.yaml: line "},
      {"- a\n- b", "(top level): must be a map"},
  };
  for (const BadFile& bad : cases) {
    EXPECT_THAT(
        ParseClusterFile(bad.text, "c.yaml"),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad.message)))
        << bad.text;
  }
}

TEST(ClusterFileTest, UnreadableFileIsNotFound) {
  EXPECT_THAT(ReadClusterFile("/nonexistent/cluster.yaml"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/cluster.yaml")));
}

}  // namespace
}  // namespace strata
