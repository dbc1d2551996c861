#include "serving/serving_store.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "embedding/initializer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/env.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

EmbeddingTableConfig Table(const std::string& name, uint32_t dim) {
  EmbeddingTableConfig config;
  config.name = name;
  config.dim = dim;
  config.seed = 9;
  config.initializer.type = InitializerType::kUniform;
  return config;
}

class ServingStoreTest : public ::testing::Test {
 protected:
  ServingStoreTest() : env_(rocksdb::NewMemEnv(rocksdb::Env::Default())) {}

  // `cache_rows` 0 reads every lookup from RocksDB.
  void Open(uint64_t cache_rows = 16,
            UnknownKeyPolicy unknown = UnknownKeyPolicy::kZeros) {
    store_.reset();
    ServingStoreOptions options;
    options.data_dir = "/serving";
    options.rocksdb_env = env_.get();
    options.cache_rows = cache_rows;
    options.unknown_keys = unknown;
    absl::StatusOr<std::unique_ptr<ServingStore>> store =
        ServingStore::Open(options);
    ASSERT_THAT(store, IsOk());
    store_ = *std::move(store);
  }

  // Applies one delta of shard `shard` at `sequence` writing `keys` of
  // table "t" (dim 2) to {value, value}.
  absl::Status Delta(uint32_t shard, uint64_t sequence,
                     const std::vector<uint64_t>& keys, float value) {
    values_.assign(keys.size() * 2, value);
    keys_ = keys;
    ShardUpdate update;
    update.shard_index = shard;
    update.rows.push_back({"t", keys_, values_});
    update.position = ShardPosition{7, sequence, 1000};
    return store_->Apply(update);
  }

  std::vector<float> Lookup(const std::vector<uint64_t>& keys,
                            size_t* missing = nullptr) {
    std::vector<float> out(keys.size() * 2, -1.0f);
    absl::StatusOr<size_t> result =
        store_->Lookup("t", keys, absl::MakeSpan(out));
    EXPECT_THAT(result, IsOk());
    if (missing != nullptr && result.ok()) *missing = *result;
    return out;
  }

  uint64_t RowCount() {
    for (const ServingTableStats& stats : store_->ListTables()) {
      if (stats.config.name == "t") return stats.num_rows;
    }
    return 0;
  }

  void CreateTable(uint32_t shard = 0) {
    ShardUpdate update;
    update.shard_index = shard;
    update.tables.push_back(Table("t", 2));
    ASSERT_THAT(store_->Apply(update), IsOk());
  }

  std::unique_ptr<rocksdb::Env> env_;
  std::unique_ptr<ServingStore> store_;
  std::vector<uint64_t> keys_;
  std::vector<float> values_;
};

TEST_F(ServingStoreTest, DeletedKeysAreForgottenFromDiskAndCache) {
  Open();
  CreateTable();
  ASSERT_THAT(Delta(0, 1, {1, 2, 3}, 1.5f), IsOk());
  Lookup({1, 2, 3});                              // Cached now.
  const std::vector<uint64_t> gone = {1, 3, 99};  // 99 never had a row.
  ShardUpdate update;
  update.deleted.push_back({"t", gone});
  update.deleted.push_back({"unknown", gone});  // Ignored.
  update.position = ShardPosition{7, 2, 2000};
  ASSERT_THAT(store_->Apply(update), IsOk());
  size_t missing = 0;
  EXPECT_THAT(Lookup({1, 2, 3}, &missing),
              ElementsAre(0.0f, 0.0f, 1.5f, 1.5f, 0.0f, 0.0f));
  EXPECT_EQ(missing, 2u);
  EXPECT_EQ(RowCount(), 1u);
  EXPECT_EQ(store_->Position(0).sequence, 2u);
  Open();  // From disk, with an empty cache.
  EXPECT_THAT(Lookup({1, 2, 3}, &missing),
              ElementsAre(0.0f, 0.0f, 1.5f, 1.5f, 0.0f, 0.0f));
  EXPECT_EQ(missing, 2u);
  EXPECT_EQ(RowCount(), 1u);
}

TEST_F(ServingStoreTest, AppliedRowsAreLookedUpInRequestOrder) {
  Open();
  CreateTable();
  ASSERT_THAT(Delta(0, 1, {1, 2}, 1.5f), IsOk());
  ASSERT_THAT(Delta(0, 2, {2}, 2.5f), IsOk());
  size_t missing = 99;
  EXPECT_THAT(Lookup({2, 3, 1}, &missing),
              ElementsAre(2.5f, 2.5f, 0.0f, 0.0f, 1.5f, 1.5f));
  EXPECT_EQ(missing, 1u);
  EXPECT_EQ(RowCount(), 2u);
  EXPECT_EQ(store_->Position(0).sequence, 2u);
  EXPECT_EQ(store_->Position(0).incarnation, 7u);
  EXPECT_EQ(store_->Position(1).sequence, 0u);
}

TEST_F(ServingStoreTest, PositionRowsAndCountsSurviveReopen) {
  Open();
  CreateTable();
  ASSERT_THAT(Delta(1, 41, {5, 6, 5}, 3.0f), IsOk());
  Open();
  EXPECT_EQ(store_->Position(1).sequence, 41u);
  EXPECT_EQ(store_->Position(1).acknowledged_micros, 1000);
  EXPECT_THAT(Lookup({5, 6}), ElementsAre(3.0f, 3.0f, 3.0f, 3.0f));
  EXPECT_EQ(RowCount(), 2u);
  ASSERT_THAT(store_->GetTableConfig("t"), IsOk());
  EXPECT_TRUE(SameTableConfig(*store_->GetTableConfig("t"), Table("t", 2)));
}

TEST_F(ServingStoreTest, SnapshotRowsDoNotAdvanceThePositionUntilItsEnd) {
  Open();
  CreateTable();
  ASSERT_THAT(Delta(0, 3, {1}, 1.0f), IsOk());
  ASSERT_THAT(store_->BeginSnapshot(0), IsOk());
  ShardUpdate rows;
  std::vector<uint64_t> keys = {1, 2};
  std::vector<float> values = {8, 8, 9, 9};
  rows.rows.push_back({"t", keys, values});
  ASSERT_THAT(store_->Apply(rows), IsOk());
  EXPECT_EQ(store_->Position(0).sequence, 3u);
  // A crash here: the store resumes from sequence 3 with some new rows.
  Open();
  EXPECT_EQ(store_->Position(0).sequence, 3u);
  EXPECT_THAT(Lookup({1, 2}), ElementsAre(8, 8, 9, 9));
  EXPECT_THAT(store_->EndSnapshot(0, {8, 10, 0}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ServingStoreTest, SnapshotEndDeletesTheShardsRowsItDidNotWrite) {
  Open();
  CreateTable();
  ASSERT_THAT(Delta(0, 1, {1, 2, 3}, 1.0f), IsOk());
  ASSERT_THAT(Delta(1, 1, {4}, 4.0f), IsOk());
  ASSERT_THAT(store_->BeginSnapshot(0), IsOk());
  ShardUpdate rows;
  std::vector<uint64_t> keys = {2};
  std::vector<float> values = {5, 5};
  rows.rows.push_back({"t", keys, values});
  ASSERT_THAT(store_->Apply(rows), IsOk());
  ASSERT_THAT(store_->EndSnapshot(0, {8, 20, 0}), IsOk());
  EXPECT_EQ(store_->Position(0).incarnation, 8u);
  EXPECT_EQ(store_->Position(0).sequence, 20u);
  size_t missing = 0;
  // Rows 1 and 3 are gone; row 4 belongs to shard 1 and stays.
  EXPECT_THAT(Lookup({1, 2, 3, 4}, &missing),
              ElementsAre(0, 0, 5, 5, 0, 0, 4, 4));
  EXPECT_EQ(missing, 2u);
  EXPECT_EQ(RowCount(), 2u);
  // Deltas after the snapshot carry its epoch: the next sweep keeps them.
  ASSERT_THAT(Delta(0, 21, {6}, 6.0f), IsOk());
  Open();
  ASSERT_THAT(store_->BeginSnapshot(0), IsOk());
  ASSERT_THAT(store_->EndSnapshot(0, {9, 1, 0}), IsOk());
  EXPECT_EQ(RowCount(), 1u);
  EXPECT_THAT(Lookup({4, 6}), ElementsAre(4, 4, 0, 0));
}

TEST_F(ServingStoreTest, UnknownKeysGetTheInitializerWhenAsked) {
  Open(16, UnknownKeyPolicy::kInitializer);
  CreateTable();
  std::vector<float> expected(2);
  Initializer(Table("t", 2).initializer, 9).Fill(12, 2, expected.data());
  EXPECT_THAT(Lookup({12}), ElementsAreArray(expected));
}

TEST_F(ServingStoreTest, BadInputIsRejected) {
  Open();
  std::vector<float> out(2);
  std::vector<uint64_t> keys = {1};
  EXPECT_THAT(store_->Lookup("t", keys, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Delta(0, 1, {1}, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument));
  CreateTable();
  std::vector<float> wrong(3);
  EXPECT_THAT(store_->Lookup("t", keys, absl::MakeSpan(wrong)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ShardUpdate update;
  std::vector<float> values = {1.0f};
  update.rows.push_back({"t", keys, values});
  update.position = ShardPosition{1, 1, 0};
  EXPECT_THAT(store_->Apply(update),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(store_->Position(0).sequence, 0u);
}

TEST_F(ServingStoreTest, ADimensionChangeDropsTheTablesRows) {
  Open();
  CreateTable();
  ASSERT_THAT(Delta(0, 1, {1}, 1.0f), IsOk());
  ShardUpdate update;
  update.tables.push_back(Table("t", 3));
  ASSERT_THAT(store_->Apply(update), IsOk());
  EXPECT_EQ(RowCount(), 0u);
  std::vector<float> out(3, -1.0f);
  std::vector<uint64_t> keys = {1};
  EXPECT_THAT(store_->Lookup("t", keys, absl::MakeSpan(out)), IsOkAndHolds(1));
  EXPECT_THAT(out, ElementsAre(0, 0, 0));
}

TEST_F(ServingStoreTest, ManyKeysComeBackInRequestOrderFromDiskAndCache) {
  Open(/*cache_rows=*/4096);
  CreateTable();
  // Rows of keys 0..1999 hold their key; the lookup asks for every other
  // key up to 3999 (half have no row), backwards, with repeats.
  std::vector<float> values;
  std::vector<uint64_t> stored;
  for (uint64_t key = 0; key < 2000; ++key) {
    stored.push_back(key);
    values.push_back(static_cast<float>(key));
    values.push_back(static_cast<float>(key));
  }
  ShardUpdate update;
  update.rows.push_back({"t", stored, values});
  update.position = ShardPosition{7, 1, 1000};
  ASSERT_THAT(store_->Apply(update), IsOk());
  std::vector<uint64_t> asked;
  std::vector<float> expected;
  for (uint64_t key = 4000; key-- > 0;) {
    if (key % 2 != 0) continue;
    for (int repeat = 0; repeat < (key % 10 == 0 ? 2 : 1); ++repeat) {
      asked.push_back(key);
      const float value = key < 2000 ? static_cast<float>(key) : 0.0f;
      expected.push_back(value);
      expected.push_back(value);
    }
  }
  size_t expected_missing = 0;
  for (uint64_t key : asked) expected_missing += key >= 2000 ? 1 : 0;
  // The first lookup reads RocksDB and fills the cache; the second is
  // answered from the cache.
  for (int pass = 0; pass < 2; ++pass) {
    size_t missing = 0;
    EXPECT_THAT(Lookup(asked, &missing), ElementsAreArray(expected))
        << "pass " << pass;
    EXPECT_EQ(missing, expected_missing) << "pass " << pass;
  }
}

// An update reads only the rows the cache does not hold to tell which are
// new: with cached, uncached and repeated new rows in one update, and with
// the cache off, the counts are the same and survive a restart.
TEST_F(ServingStoreTest, RowCountsStayExactWhenUpdatesMeetCachedRows) {
  for (uint64_t cache_rows : {uint64_t{64}, uint64_t{0}}) {
    SCOPED_TRACE(cache_rows);
    store_.reset();  // Before the file system it lives in.
    env_.reset(rocksdb::NewMemEnv(rocksdb::Env::Default()));
    Open(cache_rows);
    CreateTable();
    ASSERT_THAT(Delta(0, 1, {1, 2, 3}, 1.0f), IsOk());
    Lookup({1, 2});  // Cached when there is a cache; 3 is not.
    ASSERT_THAT(Delta(0, 2, {1, 2, 4, 4, 5, 3}, 2.0f), IsOk());
    EXPECT_EQ(RowCount(), 5u);
    ASSERT_THAT(Delta(0, 3, {5, 6, 1}, 3.0f), IsOk());
    EXPECT_EQ(RowCount(), 6u);
    EXPECT_THAT(Lookup({1, 3, 6}), ElementsAre(3, 3, 2, 2, 3, 3));
    Open(cache_rows);
    EXPECT_EQ(RowCount(), 6u);
  }
}

TEST_F(ServingStoreTest, CachedRowsFollowUpdates) {
  Open(/*cache_rows=*/64);
  CreateTable();
  for (int round = 1; round <= 5; ++round) {
    ASSERT_THAT(Delta(0, round, {1, 2, 3}, static_cast<float>(round)), IsOk());
    const float v = static_cast<float>(round);
    EXPECT_THAT(Lookup({1, 2, 3}), ElementsAre(v, v, v, v, v, v));
  }
}

TEST_F(ServingStoreTest, ConcurrentReadersNeverSeeARowGoBack) {
  // A small cache, so that rows are evicted and read back all the time.
  Open(/*cache_rows=*/64);
  CreateTable();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 200; ++k) keys.push_back(k);
  std::atomic<bool> done{false};
  std::vector<std::thread> readers;
  std::atomic<int> regressions{0};
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::vector<float> last(keys.size() * 2, 0.0f);
      std::vector<float> out(keys.size() * 2);
      std::vector<uint64_t> order = keys;
      std::rotate(order.begin(), order.begin() + 50 * r, order.end());
      while (!done.load()) {
        ASSERT_THAT(store_->Lookup("t", order, absl::MakeSpan(out)), IsOk());
        for (size_t i = 0; i < out.size(); ++i) {
          const size_t slot = order[i / 2] * 2 + i % 2;
          if (out[i] < last[slot]) ++regressions;
          last[slot] = out[i];
        }
      }
    });
  }
  for (int round = 1; round <= 300; ++round) {
    // Each round rewrites a different third of the keys.
    std::vector<uint64_t> some;
    for (uint64_t k = round % 3; k < keys.size(); k += 3) some.push_back(k);
    ASSERT_THAT(Delta(0, round, some, static_cast<float>(round)), IsOk());
  }
  done = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(regressions.load(), 0);
  const std::vector<float> final_rows = Lookup({0, 1, 2});
  EXPECT_THAT(final_rows, ElementsAre(300, 300, 298, 298, 299, 299));
}

}  // namespace
}  // namespace strata
