// Restoring a checkpoint onto another number of shards: rows split or merged
// by bucket, full and incremental checkpoints, with real stores on disk.

#include "embedding/checkpoint_reshard.h"

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/logging.h"
#include "embedding/embedding_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr FeatureId kKeys = 2000;

EmbeddingTableConfig Table(const std::string& name, uint32_t dim,
                           OptimizerType optimizer) {
  EmbeddingTableConfig config;
  config.name = name;
  config.dim = dim;
  config.seed = 5;
  config.initializer.type = InitializerType::kUniform;
  config.optimizer.type = optimizer;  // with state: it must move with rows
  config.optimizer.learning_rate = 0.05f;
  return config;
}

// The shards of one cluster, each a store in its own directory; keys go to
// the shard that owns their bucket, as PsClient sends them.
class Cluster {
 public:
  explicit Cluster(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

  absl::Status Open() {
    stores_.clear();
    for (const std::string& dir : dirs_) {
      EmbeddingStoreOptions options;
      options.data_dir = dir;
      options.durability = Durability::kSync;
      options.eviction_interval = absl::ZeroDuration();
      absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
          EmbeddingStore::Open(options);
      if (!store.ok()) return store.status();
      stores_.push_back(*std::move(store));
    }
    return absl::OkStatus();
  }
  void Close() { stores_.clear(); }

  uint32_t OwnerOf(const std::string& table, FeatureId key) const {
    return DefaultBucketOwner(BucketOf(HashString(table), key),
                              static_cast<uint32_t>(stores_.size()));
  }

  absl::Status CreateTable(const EmbeddingTableConfig& config) {
    for (auto& store : stores_) {
      absl::StatusOr<bool> created = store->CreateTable(config);
      if (!created.ok()) return created.status();
    }
    return absl::OkStatus();
  }

  // Gradient `scale` * (key % 5 + 1) on keys [begin, end).
  absl::Status Push(const std::string& table, uint32_t dim, FeatureId begin,
                    FeatureId end, float scale) {
    std::vector<std::vector<FeatureId>> keys(stores_.size());
    std::vector<std::vector<float>> gradients(stores_.size());
    for (FeatureId key = begin; key < end; ++key) {
      const uint32_t shard = OwnerOf(table, key);
      keys[shard].push_back(key);
      for (uint32_t d = 0; d < dim; ++d) {
        gradients[shard].push_back(scale * (key % 5 + 1) + 0.01f * d);
      }
    }
    for (size_t s = 0; s < stores_.size(); ++s) {
      absl::StatusOr<bool> applied = stores_[s]->ApplyGradients(
          {GradientBatch{table, keys[s], gradients[s]}}, PushId());
      if (!applied.ok()) return applied.status();
    }
    return absl::OkStatus();
  }

  // Rows of keys [0, kKeys), each read from the shard that owns it.
  std::vector<float> Rows(const std::string& table, uint32_t dim) {
    std::vector<float> rows(kKeys * dim);
    for (FeatureId key = 0; key < kKeys; ++key) {
      EXPECT_THAT(stores_[OwnerOf(table, key)]->Lookup(
                      table, {key}, absl::MakeSpan(&rows[key * dim], dim)),
                  IsOk());
    }
    return rows;
  }

  uint64_t TotalRows() {
    uint64_t rows = 0;
    for (auto& store : stores_) {
      for (const TableStats& table : store->ListTables()) {
        rows += table.num_rows;
      }
    }
    return rows;
  }

  EmbeddingStore& store(size_t s) { return *stores_[s]; }
  size_t size() const { return stores_.size(); }

 private:
  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<EmbeddingStore>> stores_;
};

class CheckpointReshardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    std::string pattern = ::testing::TempDir() + "strata_reshard_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    temp_dir_ = pattern;
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::remove_all(temp_dir_, error);
  }

  std::vector<std::string> Dirs(const std::string& prefix, int n) const {
    std::vector<std::string> dirs;
    for (int i = 0; i < n; ++i) {
      dirs.push_back(absl::StrCat(temp_dir_, "/", prefix, i));
    }
    return dirs;
  }

  // Two shards: "user" (Adagrad) and "item" (Adam) pushed, a full
  // checkpoint "full", more pushes, a table created after it ("late"),
  // then an incremental checkpoint "delta". Returns the live rows at
  // "delta", by table.
  std::map<std::string, std::vector<float>> TrainTwoShards(Cluster& live) {
    std::map<std::string, std::vector<float>> rows;
    EXPECT_THAT(live.Open(), IsOk());
    EXPECT_THAT(live.CreateTable(Table("user", 4, OptimizerType::kAdagrad)),
                IsOk());
    EXPECT_THAT(live.CreateTable(Table("item", 2, OptimizerType::kAdam)),
                IsOk());
    EXPECT_THAT(live.Push("user", 4, 0, 1200, 0.5f), IsOk());
    EXPECT_THAT(live.Push("item", 2, 0, 800, -0.25f), IsOk());
    for (size_t s = 0; s < live.size(); ++s) {
      EXPECT_THAT(live.store(s).Checkpoint("full", 10), IsOk());
    }
    EXPECT_THAT(live.Push("user", 4, 600, 1800, 1.5f), IsOk());
    EXPECT_THAT(live.CreateTable(Table("late", 3, OptimizerType::kAdagrad)),
                IsOk());
    EXPECT_THAT(live.Push("late", 3, 100, 300, 2.0f), IsOk());
    for (size_t s = 0; s < live.size(); ++s) {
      EXPECT_THAT(live.store(s).CheckpointIncremental("delta", 20), IsOk());
    }
    rows["user"] = live.Rows("user", 4);
    rows["item"] = live.Rows("item", 2);
    rows["late"] = live.Rows("late", 3);
    return rows;
  }

  std::string temp_dir_;
};

TEST_F(CheckpointReshardTest, IncrementalCheckpointOfTwoShardsOntoThreeAndOne) {
  const std::vector<std::string> sources = Dirs("source", 2);
  Cluster live(sources);
  const auto expected = TrainTwoShards(live);
  const uint64_t live_rows = live.TotalRows();
  ASSERT_EQ(live_rows, 1800u + 800u + 200u);

  for (int num_targets : {3, 1}) {
    SCOPED_TRACE(absl::StrCat(num_targets, " new shards"));
    const std::vector<std::string> targets =
        Dirs(absl::StrCat("onto", num_targets, "_"), num_targets);
    ReshardCheckpointOptions options;
    options.source_dirs = sources;
    options.checkpoint_id = "delta";
    options.target_dirs = targets;
    absl::StatusOr<ReshardCheckpointResult> result = ReshardCheckpoint(options);
    ASSERT_THAT(result, IsOk());
    EXPECT_EQ(result->checkpoint_id, "delta");
    EXPECT_EQ(result->global_step, 20u);
    EXPECT_THAT(result->tables, ElementsAre("item", "late", "user"));
    uint64_t moved = 0;
    for (uint64_t rows : result->target_rows) moved += rows;
    EXPECT_EQ(moved, live_rows);
    ASSERT_EQ(result->target_rows.size(), static_cast<size_t>(num_targets));

    // The new shards serve the checkpoint as soon as they open.
    Cluster resharded(targets);
    ASSERT_THAT(resharded.Open(), IsOk());
    EXPECT_EQ(resharded.TotalRows(), live_rows);
    for (size_t t = 0; t < resharded.size(); ++t) {
      uint64_t rows = 0;
      for (const TableStats& table : resharded.store(t).ListTables()) {
        rows += table.num_rows;
      }
      EXPECT_EQ(rows, result->target_rows[t]) << "shard " << t;
      EXPECT_THAT(resharded.store(t).ListCheckpoints(), ElementsAre("delta"));
    }
    for (const auto& [table, dim] :
         std::vector<std::pair<std::string, uint32_t>>{
             {"user", 4}, {"item", 2}, {"late", 3}}) {
      EXPECT_THAT(resharded.Rows(table, dim),
                  ElementsAreArray(expected.at(table)))
          << table;
    }

    // Optimizer state moved with the rows: the same pushes on the old and
    // the new cluster give the same rows, bit for bit.
    ASSERT_THAT(resharded.Push("user", 4, 0, 2000, -0.75f), IsOk());
    ASSERT_THAT(resharded.Push("item", 2, 0, 2000, 0.125f), IsOk());
    ASSERT_THAT(live.Push("user", 4, 0, 2000, -0.75f), IsOk());
    ASSERT_THAT(live.Push("item", 2, 0, 2000, 0.125f), IsOk());
    EXPECT_THAT(resharded.Rows("user", 4),
                ElementsAreArray(live.Rows("user", 4)));
    EXPECT_THAT(resharded.Rows("item", 2),
                ElementsAreArray(live.Rows("item", 2)));

    // And the checkpoint restores there like any other.
    ASSERT_THAT(resharded.store(0).Restore("delta"), IsOk());
    resharded.Close();
    // Put the live cluster back where it was for the next round.
    for (size_t s = 0; s < live.size(); ++s) {
      ASSERT_THAT(live.store(s).Restore("delta"), IsOk());
    }
  }
}

TEST_F(CheckpointReshardTest, AFullCheckpointReshardsUnderANewId) {
  const std::vector<std::string> sources = Dirs("source", 2);
  Cluster live(sources);
  TrainTwoShards(live);
  for (size_t s = 0; s < live.size(); ++s) {
    ASSERT_THAT(live.store(s).Restore("full"), IsOk());
  }
  const std::vector<float> user_at_full = live.Rows("user", 4);
  live.Close();

  const std::vector<std::string> targets = Dirs("target", 3);
  ReshardCheckpointOptions options;
  options.source_dirs = sources;
  options.checkpoint_id = "full";
  options.target_checkpoint_id = "full-on-3";
  options.target_dirs = targets;
  absl::StatusOr<ReshardCheckpointResult> result = ReshardCheckpoint(options);
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->global_step, 10u);
  EXPECT_THAT(result->tables, ElementsAre("item", "user"));
  Cluster resharded(targets);
  ASSERT_THAT(resharded.Open(), IsOk());
  EXPECT_EQ(resharded.TotalRows(), 1200u + 800u);
  EXPECT_THAT(resharded.Rows("user", 4), ElementsAreArray(user_at_full));
  EXPECT_THAT(resharded.store(2).ListCheckpoints(), ElementsAre("full-on-3"));
}

TEST_F(CheckpointReshardTest, SourcesOutOfOrderAreRefusedAndNothingIsLeft) {
  const std::vector<std::string> sources = Dirs("source", 2);
  Cluster live(sources);
  TrainTwoShards(live);
  live.Close();
  const std::vector<std::string> targets = Dirs("target", 3);
  ReshardCheckpointOptions options;
  options.source_dirs = {sources[1], sources[0]};
  options.checkpoint_id = "delta";
  options.target_dirs = targets;
  EXPECT_THAT(ReshardCheckpoint(options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("shard-index order")));
  for (const std::string& dir : targets) {
    if (!std::filesystem::exists(dir)) continue;
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << dir;
  }
  // The same targets can be used once the order is right.
  options.source_dirs = sources;
  EXPECT_THAT(ReshardCheckpoint(options), IsOk());
}

TEST_F(CheckpointReshardTest, AStaleCopyOfAnotherShardsRowIsSkippedWhenAsked) {
  const std::vector<std::string> sources = Dirs("source", 2);
  Cluster live(sources);
  const auto expected = TrainTwoShards(live);
  // What a bucket move killed mid-copy leaves on its target: shard 0 holds
  // a row of a key shard 1 owns, older than shard 1's.
  FeatureId key = 0;
  while (live.OwnerOf("user", key) != 1) ++key;
  absl::StatusOr<RowBlock> row = live.store(1).ReadRows("user", {key});
  ASSERT_THAT(row, IsOk());
  ASSERT_EQ(row->keys.size(), 1u);
  for (float& value : row->values) value += 1.0f;
  ASSERT_THAT(live.store(0).WriteRows(*row), IsOk());
  for (size_t s = 0; s < live.size(); ++s) {
    ASSERT_THAT(live.store(s).Checkpoint("stale", 30), IsOk());
  }
  const uint64_t owned_rows = live.TotalRows() - 1;
  live.Close();

  ReshardCheckpointOptions options;
  options.source_dirs = sources;
  options.checkpoint_id = "stale";
  options.target_dirs = Dirs("onto", 1);
  EXPECT_THAT(ReshardCheckpoint(options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("holds key ", key))));
  options.skip_unowned_rows = true;
  absl::StatusOr<ReshardCheckpointResult> result = ReshardCheckpoint(options);
  ASSERT_THAT(result, IsOk());
  EXPECT_THAT(result->skipped_rows, ElementsAre(1u, 0u));
  EXPECT_THAT(result->target_rows, ElementsAre(owned_rows));
  Cluster resharded(options.target_dirs);
  ASSERT_THAT(resharded.Open(), IsOk());
  EXPECT_THAT(resharded.Rows("user", 4), ElementsAreArray(expected.at("user")));
}

TEST_F(CheckpointReshardTest, BadOptionsNameWhatIsWrong) {
  const std::vector<std::string> sources = Dirs("source", 2);
  Cluster live(sources);
  TrainTwoShards(live);
  live.Close();
  ReshardCheckpointOptions options;
  options.source_dirs = sources;
  options.checkpoint_id = "nope";
  options.target_dirs = Dirs("target", 2);
  EXPECT_THAT(ReshardCheckpoint(options),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(absl::StrCat(sources[0], ": no checkpoint"))));
  options.checkpoint_id = "../x";
  EXPECT_THAT(ReshardCheckpoint(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.checkpoint_id = "delta";
  options.target_dirs = {sources[0]};
  EXPECT_THAT(
      ReshardCheckpoint(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("also a source")));
  const std::string used = Dirs("used", 1)[0];
  std::filesystem::create_directories(used + "/db");
  options.target_dirs = {used};
  EXPECT_THAT(
      ReshardCheckpoint(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not empty")));
  EXPECT_TRUE(std::filesystem::is_empty(used + "/db"));
  options.target_dirs.clear();
  EXPECT_THAT(
      ReshardCheckpoint(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no target")));
  options.target_dirs = Dirs("target", 1);
  EXPECT_THAT(ReshardCheckpoint(options), IsOk());
  EXPECT_THAT(std::filesystem::exists(options.target_dirs[0] + "/db"),
              ::testing::IsTrue());
  std::vector<std::string> leftovers;
  for (const auto& entry :
       std::filesystem::directory_iterator(options.target_dirs[0])) {
    const std::string name = entry.path().filename().string();
    if (name != "db" && name != "checkpoints") leftovers.push_back(name);
  }
  EXPECT_THAT(leftovers, IsEmpty());
}

}  // namespace
}  // namespace strata
