// Incremental checkpoints: a full checkpoint, deltas holding only the rows
// changed (or deleted) since the checkpoint before, and restore of any link
// of the chain, also after kill -9.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "embedding/embedding_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr FeatureId kKeys = 3000;

EmbeddingTableConfig Table(const std::string& name) {
  EmbeddingTableConfig config;
  config.name = name;
  config.dim = 4;
  config.seed = 7;
  config.initializer.type = InitializerType::kUniform;
  // Adagrad: a row's optimizer state must come back with its value.
  config.optimizer.type = OptimizerType::kAdagrad;
  config.optimizer.learning_rate = 0.1f;
  return config;
}

// Pushes gradient `scale` * (key % 7 + 1) to keys [begin, end) of `table`.
absl::Status PushRange(EmbeddingStore& store, const std::string& table,
                       FeatureId begin, FeatureId end, float scale) {
  std::vector<FeatureId> keys;
  std::vector<float> gradients;
  for (FeatureId key = begin; key < end; ++key) {
    keys.push_back(key);
    for (int d = 0; d < 4; ++d) gradients.push_back(scale * (key % 7 + 1));
  }
  return store.ApplyGradients({GradientBatch{table, keys, gradients}}, PushId())
      .status();
}

// Every row of the tables that exist, by table: what the store holds.
using State = std::map<std::string, std::vector<float>>;

class IncrementalCheckpointTest : public ::testing::TestWithParam<Durability> {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    std::string pattern = ::testing::TempDir() + "strata_delta_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    temp_dir_ = pattern;
  }
  void TearDown() override {
    store_.reset();
    std::error_code error;
    std::filesystem::remove_all(temp_dir_, error);
  }

  std::string data_dir() const { return temp_dir_ + "/data"; }

  absl::Status Open() {
    store_.reset();
    EmbeddingStoreOptions options;
    options.data_dir = data_dir();
    options.durability = GetParam();
    options.flush_interval = absl::Hours(1);
    options.eviction_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(options);
    if (!store.ok()) return store.status();
    store_ = std::move(store).value();
    return absl::OkStatus();
  }

  void Push(const std::string& table, FeatureId begin, FeatureId end,
            float scale) {
    ASSERT_THAT(PushRange(*store_, table, begin, end, scale), IsOk());
  }

  State Snapshot() {
    State state;
    std::vector<FeatureId> keys;
    for (FeatureId key = 0; key < kKeys; ++key) keys.push_back(key);
    for (const TableStats& table : store_->ListTables()) {
      std::vector<float> rows(keys.size() * table.config.dim);
      EXPECT_THAT(store_->Lookup(table.config.name, keys, absl::MakeSpan(rows)),
                  IsOk());
      // The row count too: a row that exists differs from one computed.
      rows.push_back(static_cast<float>(table.num_rows));
      state[table.config.name] = std::move(rows);
    }
    return state;
  }

  std::string temp_dir_;
  std::unique_ptr<EmbeddingStore> store_;
};

TEST_P(IncrementalCheckpointTest, RestoringEachLinkGivesTheStateItSaved) {
  ASSERT_THAT(Open(), IsOk());
  ASSERT_THAT(store_->CreateTable(Table("t")), IsOk());
  Push("t", 0, 1000, 0.5f);
  ASSERT_THAT(store_->Checkpoint("full", 10), IsOk());
  const State at_full = Snapshot();

  Push("t", 500, 1500, -0.25f);
  absl::StatusOr<CheckpointInfo> d1 = store_->CheckpointIncremental("d1", 20);
  ASSERT_THAT(d1, IsOk());
  EXPECT_EQ(d1->parent_id, "full");
  EXPECT_EQ(d1->delta_rows, 1000u);  // keys 500..1499
  EXPECT_EQ(d1->num_rows, 1500u);
  const State at_d1 = Snapshot();

  ASSERT_THAT(store_->CreateTable(Table("later")), IsOk());
  Push("t", 2000, 2100, 1.0f);
  Push("later", 0, 50, 1.0f);
  absl::StatusOr<CheckpointInfo> d2 = store_->CheckpointIncremental("d2", 30);
  ASSERT_THAT(d2, IsOk());
  EXPECT_EQ(d2->parent_id, "d1");
  EXPECT_EQ(d2->delta_rows, 150u);
  const State at_d2 = Snapshot();

  // After d2: more pushes, which the restores below must undo.
  Push("t", 0, 3000, 2.0f);
  const State after = Snapshot();
  ASSERT_NE(after, at_d2);

  EXPECT_THAT(store_->Restore("d2"), IsOkAndHolds(::testing::Field(
                                         &CheckpointInfo::global_step, 30u)));
  EXPECT_EQ(Snapshot(), at_d2);
  // The optimizer state came back too: the same push gives the same rows.
  Push("t", 0, 3000, 2.0f);
  EXPECT_EQ(Snapshot(), after);

  ASSERT_THAT(store_->Restore("d1"), IsOk());
  EXPECT_EQ(Snapshot(), at_d1);  // no table "later" yet
  ASSERT_THAT(store_->Restore("full"), IsOk());
  EXPECT_EQ(Snapshot(), at_full);
  ASSERT_THAT(store_->Restore("d2"), IsOk());
  EXPECT_EQ(Snapshot(), at_d2);
}

TEST_P(IncrementalCheckpointTest, DeletedRowsStayDeletedAfterRestore) {
  ASSERT_THAT(Open(), IsOk());
  EmbeddingTableConfig config = Table("t");
  config.initializer.type = InitializerType::kZeros;
  config.optimizer.type = OptimizerType::kSgd;
  config.optimizer.learning_rate = 1.0f;
  config.eviction.min_norm = 1.0f;
  ASSERT_THAT(store_->CreateTable(config), IsOk());
  Push("t", 0, 100, -1.0f);  // rows of norm 2 * (key % 7 + 1): kept
  ASSERT_THAT(store_->Checkpoint("full", 1), IsOk());
  // Keys 0..49 shrink to norm 0.02 * (key % 7 + 1); the sweep deletes them.
  Push("t", 0, 50, 0.99f);
  ASSERT_THAT(store_->EvictNow(), IsOkAndHolds(50u));
  const State evicted = Snapshot();
  absl::StatusOr<CheckpointInfo> delta = store_->CheckpointIncremental("d", 2);
  ASSERT_THAT(delta, IsOk());
  EXPECT_EQ(delta->delta_rows, 50u);
  EXPECT_EQ(delta->num_rows, 50u);

  ASSERT_THAT(store_->Restore("full"), IsOk());
  EXPECT_EQ(store_->ListTables()[0].num_rows, 100u);
  ASSERT_THAT(store_->Restore("d"), IsOk());
  EXPECT_EQ(store_->ListTables()[0].num_rows, 50u);
  EXPECT_EQ(Snapshot(), evicted);
}

TEST_P(IncrementalCheckpointTest, ADeltaNeedsACheckpointOfThisRunToBuildOn) {
  ASSERT_THAT(Open(), IsOk());
  ASSERT_THAT(store_->CreateTable(Table("t")), IsOk());
  EXPECT_THAT(store_->CheckpointIncremental("d0", 1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("take a full one")));
  ASSERT_THAT(store_->Checkpoint("full", 1), IsOk());
  Push("t", 0, 10, 1.0f);
  ASSERT_THAT(store_->CheckpointIncremental("d1", 2), IsOk());
  EXPECT_THAT(store_->CheckpointIncremental("d1", 3),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(store_->CheckpointIncremental("../x", 3),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // A restart forgets what changed since d1: the next delta has no base.
  ASSERT_THAT(Open(), IsOk());
  EXPECT_THAT(store_->CheckpointIncremental("d2", 3),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // A restore gives it one: the restored checkpoint.
  ASSERT_THAT(store_->Restore("d1"), IsOk());
  Push("t", 5, 15, 1.0f);
  absl::StatusOr<CheckpointInfo> d2 = store_->CheckpointIncremental("d2", 3);
  ASSERT_THAT(d2, IsOk());
  EXPECT_EQ(d2->parent_id, "d1");
  EXPECT_EQ(d2->delta_rows, 10u);
}

TEST_P(IncrementalCheckpointTest, MissingOrCorruptLinkFailsAndKeepsLiveRows) {
  ASSERT_THAT(Open(), IsOk());
  ASSERT_THAT(store_->CreateTable(Table("t")), IsOk());
  ASSERT_THAT(store_->Checkpoint("full", 1), IsOk());
  Push("t", 0, 100, 1.0f);
  ASSERT_THAT(store_->CheckpointIncremental("d1", 2), IsOk());
  Push("t", 50, 150, 1.0f);
  ASSERT_THAT(store_->CheckpointIncremental("d2", 3), IsOk());
  Push("t", 0, 200, 1.0f);
  const State live = Snapshot();

  // Garbage in the middle of d1's value file: its block checksum fails.
  const std::string values = data_dir() + "/checkpoints/d1/values.sst";
  const auto size = std::filesystem::file_size(values);
  {
    std::fstream file(values, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 3));
    file << "corrupted bytes corrupted bytes";
  }
  EXPECT_THAT(store_->Restore("d2"), Not(IsOk()));
  EXPECT_EQ(Snapshot(), live);

  std::filesystem::remove_all(data_dir() + "/checkpoints/d1");
  EXPECT_THAT(store_->Restore("d2"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("builds on 'd1', which is missing")));
  EXPECT_EQ(Snapshot(), live);
  Push("t", 0, 1, 1.0f);  // still writable
}

// What the child process of the kill -9 test does (see below): takes a full
// checkpoint and two deltas, writes the rows as of the second delta to
// `expected_file`, pushes more, says it is ready and waits to be killed.
void RunChild(const std::string& data_dir, Durability durability,
              const std::string& expected_file, const std::string& ready_file) {
  EmbeddingStoreOptions options;
  options.data_dir = data_dir;
  options.durability = durability;
  options.flush_interval = absl::Hours(1);
  absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
      EmbeddingStore::Open(options);
  ASSERT_THAT(store, IsOk());
  EmbeddingStore& s = **store;
  ASSERT_THAT(s.CreateTable(Table("t")), IsOk());
  auto push = [&s](FeatureId begin, FeatureId end, float scale) {
    return PushRange(s, "t", begin, end, scale);
  };
  ASSERT_THAT(push(0, 1000, 0.5f), IsOk());
  ASSERT_THAT(s.Checkpoint("full", 1), IsOk());
  ASSERT_THAT(push(500, 1500, -0.25f), IsOk());
  ASSERT_THAT(s.CheckpointIncremental("d1", 2), IsOk());
  ASSERT_THAT(push(1000, 2000, 1.0f), IsOk());
  ASSERT_THAT(s.CheckpointIncremental("d2", 3), IsOk());
  std::vector<FeatureId> keys;
  for (FeatureId key = 0; key < kKeys; ++key) keys.push_back(key);
  std::vector<float> at_d2(keys.size() * 4);
  ASSERT_THAT(s.Lookup("t", keys, absl::MakeSpan(at_d2)), IsOk());
  ASSERT_THAT(push(0, 3000, 2.0f), IsOk());  // after d2: undone by a restore
  {
    std::ofstream out(expected_file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(at_d2.data()),
              static_cast<std::streamsize>(at_d2.size() * sizeof(float)));
  }
  std::ofstream(ready_file) << "ready";
  while (true) ::pause();
}

// Runs only as the child of the kill -9 test, which sets the variable.
TEST(IncrementalCheckpointChild, TakesCheckpointsAndWaitsToBeKilled) {
  const char* spec = std::getenv("STRATA_DELTA_TEST_CHILD");
  if (spec == nullptr) GTEST_SKIP() << "only as a child process";
  const std::vector<std::string> parts = absl::StrSplit(spec, '|');
  ASSERT_EQ(parts.size(), 4u);
  absl::StatusOr<Durability> durability = ParseDurability(parts[1]);
  ASSERT_THAT(durability, IsOk());
  RunChild(parts[0], *durability, parts[2], parts[3]);
}

// The store lives in a child process (this test binary again, started
// fresh: RocksDB's thread pools do not survive a bare fork) that takes a full
// checkpoint and two deltas, pushes more and is killed with SIGKILL; then
// this process opens the store and restores the chain.
TEST_P(IncrementalCheckpointTest, FullPlusTwoDeltasRestoreAfterKill9) {
  const std::string expected_file = temp_dir_ + "/at_d2";
  const std::string ready_file = temp_dir_ + "/ready";
  const std::string spec =
      absl::StrCat(data_dir(), "|", DurabilityName(GetParam()), "|",
                   expected_file, "|", ready_file);
  absl::StatusOr<pid_t> spawned = strata::testing::SpawnThisTestAsChild(
      "IncrementalCheckpointChild.*", "STRATA_DELTA_TEST_CHILD", spec);
  ASSERT_THAT(spawned, IsOk());
  const pid_t child = *spawned;
  // Whatever happens below, the child does not outlive the test.
  absl::Cleanup reap = [child] {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!std::filesystem::exists(ready_file) && absl::Now() < deadline) {
    ASSERT_EQ(::waitpid(child, nullptr, WNOHANG), 0) << "child exited early";
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(std::filesystem::exists(ready_file)) << "child not ready in 60s";
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  std::move(reap).Cancel();

  ASSERT_THAT(Open(), IsOk());
  // What the child pushed after d2 is in the live store, as acknowledged
  // (periodic mode promises at most one flush interval lost: maybe all).
  if (GetParam() != Durability::kPeriodic) {
    EXPECT_EQ(store_->ListTables()[0].num_rows, 3000u);
  }
  ASSERT_THAT(store_->Restore("d2"), IsOk());
  std::vector<float> expected(kKeys * 4);
  std::ifstream in(expected_file, std::ios::binary);
  in.read(reinterpret_cast<char*>(expected.data()),
          static_cast<std::streamsize>(expected.size() * sizeof(float)));
  ASSERT_TRUE(in) << "cannot read " << expected_file;
  State restored = Snapshot();
  EXPECT_EQ(restored.at("t").back(), 2000.0f);  // the row count
  restored.at("t").pop_back();
  EXPECT_EQ(restored.at("t"), expected);
}

INSTANTIATE_TEST_SUITE_P(Modes, IncrementalCheckpointTest,
                         ::testing::Values(Durability::kSync,
                                           Durability::kGroup,
                                           Durability::kPeriodic),
                         [](const auto& info) {
                           return std::string(DurabilityName(info.param));
                         });

}  // namespace
}  // namespace strata
