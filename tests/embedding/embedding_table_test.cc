#include "embedding/embedding_table.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "embedding/initializer.h"
#include "embedding/optimizer.h"
#include "embedding/table_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

EmbeddingTableConfig Config(OptimizerType optimizer, uint32_t dim = 8) {
  EmbeddingTableConfig config;
  config.name = "t";
  config.dim = dim;
  config.seed = 1234;
  config.initializer.type = InitializerType::kUniform;
  config.initializer.min = -0.5f;
  config.initializer.max = 0.5f;
  config.optimizer.type = optimizer;
  return config;
}

// SGD, learning rate 1, zero rows: a gradient of 1 subtracts exactly 1.
EmbeddingTableConfig CountingConfig(uint32_t dim = 4) {
  EmbeddingTableConfig config;
  config.name = "counts";
  config.dim = dim;
  config.initializer.type = InitializerType::kZeros;
  config.optimizer.type = OptimizerType::kSgd;
  config.optimizer.learning_rate = 1.0f;
  return config;
}

std::vector<float> Lookup(const EmbeddingTable& table,
                          const std::vector<FeatureId>& keys) {
  std::vector<float> out(keys.size() * table.dim());
  table.Lookup(keys, out.data());
  return out;
}

struct StoredRow {
  std::vector<float> value;
  std::vector<float> state;
};

std::map<FeatureId, StoredRow> AllRows(const EmbeddingTable& table) {
  std::map<FeatureId, StoredRow> rows;
  table.ForEachRow([&](FeatureId key, const float* value, const float* state) {
    EXPECT_EQ(rows.count(key), 0u) << "row " << key << " visited twice";
    rows[key] = {std::vector<float>(value, value + table.dim()),
                 std::vector<float>(state, state + table.state_dim())};
  });
  return rows;
}

std::vector<float> RandomGradients(std::mt19937& rng, size_t count) {
  std::vector<float> out(count);
  for (float& g : out) g = static_cast<float>(int(rng() % 2001) - 1000) / 100;
  return out;
}

TEST(EmbeddingTableTest, LookupOfUnseenKeyReturnsInitializerRowWithoutStoring) {
  const EmbeddingTableConfig config = Config(OptimizerType::kAdagrad);
  const EmbeddingTable table(config, /*id=*/3);
  EXPECT_EQ(table.id(), 3u);
  EXPECT_EQ(table.dim(), 8u);
  const Initializer initializer(config.initializer, config.seed);
  const std::vector<FeatureId> keys = {0, 17, 17, ~FeatureId{0}, 99};
  const std::vector<float> out = Lookup(table, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<float> expected(config.dim);
    initializer.Fill(keys[i], config.dim, expected.data());
    EXPECT_EQ(std::vector<float>(out.begin() + i * config.dim,
                                 out.begin() + (i + 1) * config.dim),
              expected)
        << keys[i];
  }
  EXPECT_EQ(table.num_rows(), 0u);
  EXPECT_THAT(AllRows(table), IsEmpty());
}

TEST(EmbeddingTableTest, LookupKeepsKeyOrderAcrossStripes) {
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  // Rows 0..4999 hold -key (every other key stored, the rest unseen = 0).
  std::vector<FeatureId> keys;
  for (FeatureId key = 0; key < 5000; ++key) keys.push_back(key);
  for (FeatureId key = 0; key < 5000; key += 2) {
    std::vector<FeatureId> one(key, key);  // `key` copies of the key.
    if (one.empty()) continue;
    table.ApplyGradients(one, std::vector<float>(key, 1.0f).data(), false,
                         nullptr);
  }
  std::shuffle(keys.begin(), keys.end(), std::mt19937(7));
  const std::vector<float> out = Lookup(table, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    const float expected = keys[i] % 2 == 0 ? -static_cast<float>(keys[i]) : 0;
    ASSERT_EQ(out[i], expected) << "position " << i << " key " << keys[i];
  }
  EXPECT_EQ(table.num_rows(), 2499u);  // Key 0 was never updated.
}

class EmbeddingTableOptimizerTest
    : public ::testing::TestWithParam<OptimizerType> {};

TEST_P(EmbeddingTableOptimizerTest,
       ApplyGradientsThenLookupGivesOptimizerResult) {
  const EmbeddingTableConfig config = Config(GetParam());
  EmbeddingTable table(config, 1);
  const Initializer initializer(config.initializer, config.seed);
  const auto optimizer = Optimizer::Create(config.optimizer, config.dim);
  EXPECT_EQ(table.state_dim(), optimizer->state_dim());

  std::map<FeatureId, StoredRow> expected;
  std::mt19937 rng(42);
  for (int round = 0; round < 20; ++round) {
    std::vector<FeatureId> keys;
    for (int i = 0; i < 30; ++i) keys.push_back(rng() % 50);
    const std::vector<float> gradients =
        RandomGradients(rng, keys.size() * config.dim);
    table.ApplyGradients(keys, gradients.data(), false, nullptr);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, inserted] = expected.try_emplace(keys[i]);
      StoredRow& row = it->second;
      if (inserted) {
        row.value.resize(config.dim);
        row.state.resize(optimizer->state_dim());
        initializer.Fill(keys[i], config.dim, row.value.data());
        optimizer->InitState(row.state.data());
      }
      optimizer->Apply(gradients.data() + i * config.dim, row.value.data(),
                       row.state.data());
    }
  }
  const std::map<FeatureId, StoredRow> actual = AllRows(table);
  ASSERT_EQ(actual.size(), expected.size());
  EXPECT_EQ(table.num_rows(), expected.size());
  for (const auto& [key, row] : expected) {
    ASSERT_EQ(actual.count(key), 1u) << key;
    EXPECT_EQ(actual.at(key).value, row.value) << key;
    EXPECT_EQ(actual.at(key).state, row.state) << key;
    EXPECT_EQ(Lookup(table, {key}), row.value) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers, EmbeddingTableOptimizerTest,
    ::testing::Values(OptimizerType::kSgd, OptimizerType::kAdagrad,
                      OptimizerType::kAdam, OptimizerType::kFtrl),
    [](const auto& info) { return std::string(OptimizerName(info.param)); });

TEST(EmbeddingTableTest, DuplicateKeyInOneBatchIsAppliedTwiceInOrder) {
  // Adam is order-sensitive: applying g1 then g2 differs from g2 then g1.
  const EmbeddingTableConfig config = Config(OptimizerType::kAdam, 2);
  EmbeddingTable table(config, 1);
  const std::vector<FeatureId> keys = {5, 6, 5};
  const std::vector<float> gradients = {1.0f, -2.0f, 0.5f, 0.5f, 3.0f, 0.25f};
  int visits_of_5 = 0;
  table.ApplyGradients(keys, gradients.data(), false,
                       [&](FeatureId key, const float*, const float* state) {
                         if (key == 5) {
                           ++visits_of_5;
                           EXPECT_EQ(state[4], float(visits_of_5));  // Step.
                         }
                       });
  EXPECT_EQ(visits_of_5, 2);

  const auto optimizer = Optimizer::Create(config.optimizer, 2);
  std::vector<float> w(2), state(optimizer->state_dim());
  Initializer(config.initializer, config.seed).Fill(5, 2, w.data());
  optimizer->InitState(state.data());
  optimizer->Apply(&gradients[0], w.data(), state.data());
  optimizer->Apply(&gradients[4], w.data(), state.data());
  EXPECT_EQ(Lookup(table, {5}), w);
  EXPECT_EQ(AllRows(table).at(5).state, state);
  EXPECT_EQ(table.num_rows(), 2u);
}

TEST(EmbeddingTableTest, DuplicateKeyWithSgdSubtractsBothGradients) {
  EmbeddingTable table(CountingConfig(), 1);
  const std::vector<FeatureId> keys = {9, 9, 9};
  const std::vector<float> ones(keys.size() * 4, 1.0f);
  table.ApplyGradients(keys, ones.data(), false, nullptr);
  EXPECT_THAT(Lookup(table, {9}),
              ElementsAreArray({-3.0f, -3.0f, -3.0f, -3.0f}));
}

TEST(EmbeddingTableTest, OnUpdatedSeesEveryUpdateWithItsNewValue) {
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  const std::vector<FeatureId> keys = {1, 2, 1, 3};
  const std::vector<float> gradients = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<std::pair<FeatureId, float>> seen;
  table.ApplyGradients(keys, gradients.data(), false,
                       [&](FeatureId key, const float* value, const float*) {
                         seen.emplace_back(key, *value);
                       });
  // Updates of one key come in batch order; keys of different stripes in
  // any order.
  EXPECT_THAT(
      seen, UnorderedElementsAreArray(std::vector<std::pair<FeatureId, float>>{
                {1, -1.0f}, {1, -4.0f}, {2, -2.0f}, {3, -4.0f}}));
  auto first_1 =
      std::find(seen.begin(), seen.end(), std::make_pair(FeatureId{1}, -1.0f));
  auto second_1 =
      std::find(seen.begin(), seen.end(), std::make_pair(FeatureId{1}, -4.0f));
  EXPECT_LT(first_1, second_1);
}

void ConcurrentPushes(bool overlapping) {
  constexpr int kThreads = 4;
  constexpr int kKeysPerThread = 512;
  constexpr int kRounds = 40;
  EmbeddingTable table(CountingConfig(), 1);
  std::atomic<int> updates{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<FeatureId> keys;
      for (int k = 0; k < kKeysPerThread; ++k) {
        keys.push_back(overlapping ? k : t * kKeysPerThread + k);
      }
      const std::vector<float> ones(keys.size() * 4, 1.0f);
      for (int round = 0; round < kRounds; ++round) {
        table.ApplyGradients(keys, ones.data(), /*track_dirty=*/true,
                             [&](FeatureId, const float*, const float*) {
                               updates.fetch_add(1, std::memory_order_relaxed);
                             });
        // A concurrent reader must see whole numbers only.
        std::vector<float> row(4);
        table.Lookup({keys[round % keys.size()]}, row.data());
        EXPECT_EQ(row[0], row[3]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(updates.load(), kThreads * kKeysPerThread * kRounds);
  const int distinct = overlapping ? kKeysPerThread : kThreads * kKeysPerThread;
  const float expected = overlapping ? -float(kThreads * kRounds) : -kRounds;
  EXPECT_EQ(table.num_rows(), uint64_t(distinct));
  const auto rows = AllRows(table);
  ASSERT_EQ(rows.size(), size_t(distinct));
  for (const auto& [key, row] : rows) {
    ASSERT_THAT(row.value,
                ElementsAreArray({expected, expected, expected, expected}))
        << key;
  }
  int dirty = 0;
  table.TakeDirtyRows([&](FeatureId, const float* value, const float*) {
    EXPECT_EQ(value[0], expected);
    ++dirty;
  });
  EXPECT_EQ(dirty, distinct);
}

TEST(EmbeddingTableTest, ConcurrentPushesOnDisjointKeysAreAllApplied) {
  ConcurrentPushes(/*overlapping=*/false);
}

TEST(EmbeddingTableTest, ConcurrentPushesOnSameKeysAreAllApplied) {
  ConcurrentPushes(/*overlapping=*/true);
}

TEST(EmbeddingTableTest, TakeDirtyRowsVisitsExactlyTheUpdatedKeysOnce) {
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  const std::vector<float> ones(8, 1.0f);
  table.ApplyGradients({1, 2, 3, 2, 1000000007}, ones.data(), true, nullptr);
  table.ApplyGradients({4}, ones.data(), /*track_dirty=*/false, nullptr);
  const float put_value = 7.0f;
  table.PutRow(5, &put_value, nullptr);  // Restores are not updates.

  std::map<FeatureId, int> visits;
  std::map<FeatureId, float> values;
  auto take = [&] {
    visits.clear();
    values.clear();
    table.TakeDirtyRows([&](FeatureId key, const float* value, const float*) {
      ++visits[key];
      values[key] = *value;
    });
  };
  take();
  EXPECT_EQ(visits, (std::map<FeatureId, int>{
                        {1, 1}, {2, 1}, {3, 1}, {1000000007, 1}}));
  EXPECT_EQ(values,
            (std::map<FeatureId, float>{
                {1, -1.0f}, {2, -2.0f}, {3, -1.0f}, {1000000007, -1.0f}}));
  take();
  EXPECT_THAT(visits, IsEmpty());
  table.ApplyGradients({3}, ones.data(), true, nullptr);
  take();
  EXPECT_EQ(visits, (std::map<FeatureId, int>{{3, 1}}));
  EXPECT_EQ(values[3], -2.0f);
  EXPECT_EQ(table.num_rows(), 6u);
}

TEST(EmbeddingTableTest, TakeDirtyRowsSkipsRemovedRowsAndTakesRemadeOnesOnce) {
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  const std::vector<FeatureId> keys = {1, 2, 3, 4, 5, 6};
  const std::vector<float> ones(keys.size(), 1.0f);
  table.ApplyGradients(keys, ones.data(), /*track_dirty=*/true, nullptr);
  EXPECT_EQ(table.RemoveRows({2, 4, 6}), 3u);
  EXPECT_EQ(table.num_dirty_rows(), 3u);
  // Made again: dirty once more, and listed twice inside the table.
  table.ApplyGradients({4}, ones.data(), /*track_dirty=*/true, nullptr);
  EXPECT_EQ(table.num_dirty_rows(), 4u);

  std::map<FeatureId, int> visits;
  table.TakeDirtyRows([&](FeatureId key, const float* value, const float*) {
    ++visits[key];
    EXPECT_EQ(*value, -1.0f) << key;
  });
  EXPECT_EQ(visits, (std::map<FeatureId, int>{{1, 1}, {3, 1}, {4, 1}, {5, 1}}));
  EXPECT_EQ(table.num_dirty_rows(), 0u);
}

TEST(EmbeddingTableTest, RowsRemovedAndMadeAgainKeepTheDirtyListBounded) {
  // Between two flushes a row may be deleted and made again any number of
  // times; each time leaves its key in the list of dirty keys, which must
  // not grow with them.
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  const float one = 1.0f;
  table.ApplyGradients({7}, &one, /*track_dirty=*/true, nullptr);
  const uint64_t before = table.memory_bytes();
  for (int i = 0; i < 100000; ++i) {
    ASSERT_EQ(table.RemoveRows({7}), 1u);
    table.ApplyGradients({7}, &one, /*track_dirty=*/true, nullptr);
  }
  EXPECT_LT(table.memory_bytes(), before + 64 * 1024);
  EXPECT_EQ(table.num_dirty_rows(), 1u);
  int visits = 0;
  table.TakeDirtyRows([&](FeatureId key, const float*, const float*) {
    EXPECT_EQ(key, 7u);
    ++visits;
  });
  EXPECT_EQ(visits, 1);
}

TEST(EmbeddingTableTest, APeakOfDirtyRowsGivesItsListsRoomBackAtASmallerFlush) {
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  std::vector<FeatureId> keys(200000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  const std::vector<float> ones(keys.size(), 1.0f);
  const auto take = [&table] {
    size_t rows = 0;
    table.TakeDirtyRows([&](FeatureId, const float*, const float*) { ++rows; });
    return rows;
  };
  table.ApplyGradients(keys, ones.data(), /*track_dirty=*/true, nullptr);
  EXPECT_EQ(take(), keys.size());
  const uint64_t after_peak = table.memory_bytes();
  // The same load again keeps the lists' room...
  table.ApplyGradients(keys, ones.data(), /*track_dirty=*/true, nullptr);
  EXPECT_EQ(take(), keys.size());
  EXPECT_EQ(table.memory_bytes(), after_peak);
  // ...a flush of a few rows gives it back: 8 bytes a key.
  table.ApplyGradients({5}, ones.data(), /*track_dirty=*/true, nullptr);
  EXPECT_EQ(take(), 1u);
  EXPECT_LT(table.memory_bytes(), after_peak - keys.size() * 8 / 2);
}

TEST(EmbeddingTableTest, TakeDirtyRowsVisitsInAscendingKeyOrder) {
  // The store's memtable sorts what a flush writes: rows that come in key
  // order (across every stripe) spare it a scattered sort.
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  std::mt19937_64 random(12345);
  std::vector<FeatureId> keys;
  for (int i = 0; i < 5000; ++i) keys.push_back(random());
  keys.push_back(0);
  keys.push_back(~FeatureId{0});
  const std::vector<float> ones(keys.size(), 1.0f);
  table.ApplyGradients(keys, ones.data(), /*track_dirty=*/true, nullptr);

  std::vector<FeatureId> visited;
  table.TakeDirtyRows([&](FeatureId key, const float* value, const float*) {
    EXPECT_EQ(*value, -1.0f) << key;
    visited.push_back(key);
  });
  std::vector<FeatureId> expected = keys;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(visited, expected);
}

TEST(EmbeddingTableTest, PutRowReplacesValueAndOptimizerState) {
  const EmbeddingTableConfig config = Config(OptimizerType::kAdagrad, 2);
  EmbeddingTable table(config, 1);
  const float value[2] = {1.0f, 2.0f};
  const float state[2] = {4.0f, 9.0f};  // Accumulators.
  table.PutRow(8, value, state);
  table.PutRow(8, value, state);  // Replacing, not adding a row.
  EXPECT_EQ(table.num_rows(), 1u);
  EXPECT_THAT(Lookup(table, {8}), ElementsAreArray({1.0f, 2.0f}));
  EXPECT_THAT(AllRows(table).at(8).state, ElementsAreArray({4.0f, 9.0f}));
  // The next update continues from the stored accumulators:
  // a = 4 + 0 = 4 -> w -= lr * 0; a = 9 + 16 = 25 -> w -= 0.01 * 4 / 5.
  const float g[2] = {0.0f, 4.0f};
  table.ApplyGradients({8}, g, false, nullptr);
  const std::vector<float> after = Lookup(table, {8});
  EXPECT_EQ(after[0], 1.0f);
  EXPECT_FLOAT_EQ(after[1], 2.0f - 0.01f * 4.0f / (5.0f + 1e-7f));
  EXPECT_THAT(AllRows(table).at(8).state, ElementsAreArray({4.0f, 25.0f}));
}

// Staging checks each new row for inf and NaN: an update that would make
// one is refused, naming the key and whether value or state overflowed,
// and nothing of the push reaches the table.
TEST(EmbeddingTableTest, StagingRefusesAnUpdateThatOverflowsAValue) {
  EmbeddingTableConfig config = CountingConfig(/*dim=*/16);
  config.optimizer.learning_rate = 3e38f;
  EmbeddingTable table(config, 1);
  const std::vector<FeatureId> keys = {4, 5, 6};
  std::vector<float> gradients(keys.size() * 16, 0.0f);
  gradients[16 + 13] = 10.0f;  // key 5, value 13: -3e39 is -inf
  EmbeddingTable::StagedRows staged;
  const absl::Status refused =
      table.StageGradients(keys, gradients.data(), 1, nullptr, &staged);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr("key 5 would make its value non-finite"),
                    HasSubstr("-inf")));
  EXPECT_EQ(table.num_rows(), 0u);

  // A small step is staged, and only the commit puts it in the table.
  gradients[16 + 13] = 1e-37f;
  ASSERT_TRUE(
      table.StageGradients(keys, gradients.data(), 1, nullptr, &staged).ok());
  EXPECT_EQ(table.num_rows(), 0u);
  table.CommitStaged(staged);
  EXPECT_EQ(table.num_rows(), 3u);
  EXPECT_FLOAT_EQ(Lookup(table, {5})[13], -30.0f);
}

TEST(EmbeddingTableTest, StagingRefusesAnUpdateThatOverflowsTheState) {
  // Adagrad's accumulator adds the gradient's square: 1e30 squared is inf,
  // while the value's step stays finite. Dim 40: the check takes the
  // row's 80 floats as a block of 64 and a rest, and the overflow (float
  // 50) lies in the block; the value's above lay in a row of 16, a rest.
  EmbeddingTable table(Config(OptimizerType::kAdagrad, 40), 1);
  std::vector<float> gradients(40, 0.0f);
  gradients[10] = 1e30f;
  EmbeddingTable::StagedRows staged;
  const absl::Status refused =
      table.StageGradients({77}, gradients.data(), 1, nullptr, &staged);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              HasSubstr("key 77 would make its optimizer state non-finite"));
  EXPECT_EQ(table.num_rows(), 0u);
}

TEST(EmbeddingTableTest, MemoryGrowsWithRows) {
  EmbeddingTable table(CountingConfig(/*dim=*/16), 1);
  const uint64_t empty = table.memory_bytes();
  std::vector<FeatureId> keys(10000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  const std::vector<float> gradients(keys.size() * 16, 1.0f);
  table.ApplyGradients(keys, gradients.data(), false, nullptr);
  EXPECT_EQ(table.num_rows(), 10000u);
  // At least the 16 floats of each row.
  EXPECT_GE(table.memory_bytes(), empty + 10000 * 16 * sizeof(float));
}

// Enough rows that every stripe's index grows several times, then pushes
// and pulls of random existing keys: each finds its row (none is created
// again) and sees every update.
TEST(EmbeddingTableTest, ManyRowsAreEachFoundAfterTheIndexGrows) {
  EmbeddingTable table(CountingConfig(/*dim=*/1), 1);
  constexpr uint64_t kRows = 200000;
  std::vector<FeatureId> keys(kRows);
  for (uint64_t k = 0; k < kRows; ++k) keys[k] = k * 0x9E3779B9u;
  std::vector<float> gradients(kRows, -1.0f);
  table.ApplyGradients(keys, gradients.data(), false, nullptr);
  ASSERT_EQ(table.rows_in_memory(), kRows);
  std::mt19937_64 random(7);
  std::vector<FeatureId> batch(8192);
  std::map<FeatureId, float> expected;
  for (FeatureId key : keys) expected[key] = 1.0f;
  for (int round = 0; round < 10; ++round) {
    for (FeatureId& key : batch) key = keys[random() % kRows];
    const std::vector<float> ones(batch.size(), -1.0f);
    table.ApplyGradients(batch, ones.data(), false, nullptr);
    for (FeatureId key : batch) expected[key] += 1.0f;
  }
  EXPECT_EQ(table.rows_in_memory(), kRows);
  const std::vector<float> values = Lookup(table, keys);
  for (uint64_t k = 0; k < kRows; ++k) {
    ASSERT_EQ(values[k], expected[keys[k]]) << "key " << keys[k];
  }
}

}  // namespace
}  // namespace strata
