#include "embedding/internal/row_index.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace embedding_internal {
namespace {

// Checks `index` against `model` entry by entry, both ways.
void ExpectSameAs(const RowIndex& index,
                  const std::unordered_map<FeatureId, uint32_t>& model) {
  ASSERT_EQ(index.size(), model.size());
  for (const auto& [key, slot] : model) {
    ASSERT_EQ(index.Find(key), slot) << "key " << key;
  }
  size_t visited = 0;
  for (const auto& [key, slot] : index) {
    ++visited;
    auto it = model.find(key);
    ASSERT_NE(it, model.end()) << "key " << key << " should be gone";
    EXPECT_EQ(it->second, slot);
  }
  EXPECT_EQ(visited, model.size());
}

TEST(RowIndexTest, EmptyIndexFindsNothingAndAllocatesNothing) {
  RowIndex index;
  EXPECT_EQ(index.Find(0), RowIndex::kAbsent);
  EXPECT_EQ(index.Find(UINT64_MAX), RowIndex::kAbsent);
  EXPECT_FALSE(index.Erase(7));
  index.Prefetch(7);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.capacity(), 0u);
  EXPECT_TRUE(index.begin() == index.end());
}

TEST(RowIndexTest, KeysAtTheEndsOfTheRangeAreOrdinaryKeys) {
  RowIndex index;
  index.Set(0, 5);
  index.Set(UINT64_MAX, 6);
  EXPECT_EQ(index.Find(0), 5u);
  EXPECT_EQ(index.Find(UINT64_MAX), 6u);
  index.Set(0, 9);  // replaces
  EXPECT_EQ(index.size(), 2u);
  EXPECT_EQ(index.Find(0), 9u);
  EXPECT_TRUE(index.Erase(0));
  EXPECT_EQ(index.Find(0), RowIndex::kAbsent);
  EXPECT_EQ(index.Find(UINT64_MAX), 6u);
}

// Random sets and erases over a small key range, so that probe runs are
// long and wrap around the end of small tables, checked against a map after
// every step: erasing from the middle of a run must keep every key after it
// reachable.
TEST(RowIndexTest, RandomSetsAndErasesMatchAMap) {
  std::mt19937_64 random(42);
  RowIndex index;
  std::unordered_map<FeatureId, uint32_t> model;
  for (int step = 0; step < 20000; ++step) {
    const FeatureId key = random() % 300;
    if (random() % 3 == 0) {
      EXPECT_EQ(index.Erase(key), model.erase(key) == 1) << "step " << step;
    } else {
      const uint32_t slot = static_cast<uint32_t>(random() % 100000);
      index.Set(key, slot);
      model[key] = slot;
    }
    if (step % 97 == 0) ExpectSameAs(index, model);
  }
  ExpectSameAs(index, model);
}

TEST(RowIndexTest, StaysAtMostSevenTenthsFullAndReserveAvoidsGrowth) {
  RowIndex index;
  index.Reserve(1000);
  const size_t reserved = index.capacity();
  EXPECT_GE(reserved * 7, 1000u * 10);
  EXPECT_EQ(reserved & (reserved - 1), 0u) << "a power of two";
  for (uint32_t k = 0; k < 1000; ++k) index.Set(k * 7919, k);
  EXPECT_EQ(index.capacity(), reserved);
  index.Set(1u << 30, 1000);
  EXPECT_GE(index.capacity() * 7, index.size() * 10);
  EXPECT_EQ(RowIndex::BytesFor(1000), reserved * sizeof(RowIndex::Entry));
}

TEST(RowIndexTest, ShrinkToGivesBackMemoryAndKeepsEveryKey) {
  RowIndex index;
  std::unordered_map<FeatureId, uint32_t> model;
  for (uint32_t k = 0; k < 5000; ++k) {
    index.Set(k, k);
    model[k] = k;
  }
  for (uint32_t k = 0; k < 4900; ++k) {
    index.Erase(k);
    model.erase(k);
  }
  const size_t grown = index.capacity();
  index.ShrinkTo(100);
  EXPECT_LT(index.capacity(), grown);
  EXPECT_EQ(index.capacity(),
            RowIndex::BytesFor(100) / sizeof(RowIndex::Entry));
  ExpectSameAs(index, model);
  // Never below what it holds.
  index.ShrinkTo(0);
  ExpectSameAs(index, model);
}

TEST(RowIndexTest, DirtyMarksFollowTheirKeysAndAreCounted) {
  RowIndex index;
  EXPECT_FALSE(index.MarkDirty(1)) << "no such key";
  index.Set(1, 10);
  index.Set(2, 20);
  EXPECT_FALSE(index.IsDirty(1)) << "a new key is not marked";
  EXPECT_TRUE(index.MarkDirty(1));
  EXPECT_FALSE(index.MarkDirty(1)) << "marked already";
  EXPECT_EQ(index.dirty_count(), 1u);
  index.Set(1, 11);  // a new slot keeps the mark
  EXPECT_TRUE(index.IsDirty(1));
  EXPECT_FALSE(index.IsDirty(2));
  EXPECT_FALSE(index.ClearDirty(2)) << "was not marked";
  EXPECT_TRUE(index.ClearDirty(1));
  EXPECT_FALSE(index.ClearDirty(1));
  EXPECT_EQ(index.dirty_count(), 0u);
  EXPECT_TRUE(index.MarkDirty(2));
  EXPECT_TRUE(index.Erase(2));
  EXPECT_EQ(index.dirty_count(), 0u) << "erased with its key";
  index.Set(2, 21);
  EXPECT_FALSE(index.IsDirty(2)) << "made anew, not marked";
  EXPECT_EQ(index.Find(1), 11u);
}

// Marks survive growth, shrinking, moves and the shifts of Erase: random
// operations over a small key range, checked against a set of marked keys.
TEST(RowIndexTest, RandomMarksMatchASetThroughGrowthAndErases) {
  std::mt19937_64 random(7);
  RowIndex index;
  std::unordered_map<FeatureId, uint32_t> model;
  std::unordered_map<FeatureId, bool> marked;
  for (int step = 0; step < 30000; ++step) {
    const FeatureId key = random() % 400;
    switch (random() % 5) {
      case 0:
        EXPECT_EQ(index.Erase(key), model.erase(key) == 1);
        marked.erase(key);
        break;
      case 1:
        EXPECT_EQ(index.MarkDirty(key), model.count(key) == 1 && !marked[key]);
        if (model.count(key) == 1) marked[key] = true;
        break;
      case 2:
        EXPECT_EQ(index.ClearDirty(key), model.count(key) == 1 && marked[key]);
        marked[key] = false;
        break;
      default: {
        const uint32_t slot = static_cast<uint32_t>(random() % 100000);
        index.Set(key, slot);
        model[key] = slot;
      }
    }
    if (step % 5000 == 4999) {
      index.ShrinkTo(0);
      RowIndex moved = std::move(index);
      index = std::move(moved);
    }
  }
  ExpectSameAs(index, model);
  size_t count = 0;
  for (const auto& [key, slot] : model) {
    EXPECT_EQ(index.IsDirty(key), marked[key]) << "key " << key;
    count += marked[key] ? 1 : 0;
  }
  EXPECT_EQ(index.dirty_count(), count);
}

TEST(RowIndexTest, MovedFromIndexIsEmptyAndUsable) {
  RowIndex index;
  index.Set(3, 4);
  RowIndex moved = std::move(index);
  EXPECT_EQ(moved.Find(3), 4u);
  EXPECT_EQ(index.size(), 0u);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(index.Find(3), RowIndex::kAbsent);
  index.Set(8, 1);
  EXPECT_EQ(index.Find(8), 1u);
}

}  // namespace
}  // namespace embedding_internal
}  // namespace strata
