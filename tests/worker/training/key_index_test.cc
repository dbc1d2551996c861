// KeyIndex against a plain map: first-appearance numbering, a table kept
// from batch to batch that forgets the last batch's keys, growth for a
// larger batch.

#include "worker/training/key_index.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

struct Indexed {
  std::vector<uint64_t> unique_keys;
  std::vector<uint32_t> rows;
};

Indexed IndexWith(KeyIndex& index, const std::vector<uint64_t>& keys) {
  Indexed out;
  out.rows.assign(keys.size(), 0xFFFFFFFFu);
  out.unique_keys = {999};  // Cleared by Index.
  index.Index(keys, &out.unique_keys, absl::MakeSpan(out.rows));
  return out;
}

// What Index must give, by a map.
void ExpectAsByMap(const std::vector<uint64_t>& keys, const Indexed& got) {
  std::unordered_map<uint64_t, uint32_t> position;
  std::vector<uint64_t> unique_keys;
  for (size_t k = 0; k < keys.size(); ++k) {
    auto [it, inserted] = position.try_emplace(keys[k], unique_keys.size());
    if (inserted) unique_keys.push_back(keys[k]);
    ASSERT_EQ(got.rows[k], it->second) << "key occurrence " << k;
  }
  EXPECT_EQ(got.unique_keys, unique_keys);
}

TEST(KeyIndexTest, NumbersDistinctKeysInOrderOfFirstAppearance) {
  KeyIndex index;
  const std::vector<uint64_t> keys = {7, 0, 7, 42, 0, ~0ull, 42, 7};
  const Indexed got = IndexWith(index, keys);
  EXPECT_EQ(got.unique_keys, (std::vector<uint64_t>{7, 0, 42, ~0ull}));
  EXPECT_EQ(got.rows, (std::vector<uint32_t>{0, 1, 0, 2, 1, 3, 2, 0}));
}

TEST(KeyIndexTest, ManyRandomKeysWithRepeats) {
  std::mt19937_64 random(5);
  std::vector<uint64_t> keys(100000);
  // A few hot keys and a long tail, as a batch's fields give.
  for (uint64_t& key : keys) key = random() % 3 == 0 ? random() % 50 : random();
  KeyIndex index;
  ExpectAsByMap(keys, IndexWith(index, keys));
}

TEST(KeyIndexTest, ANewBatchForgetsTheLastOnesKeys) {
  KeyIndex index;
  const Indexed first = IndexWith(index, {1, 2, 3, 2});
  EXPECT_EQ(first.unique_keys, (std::vector<uint64_t>{1, 2, 3}));
  const Indexed second = IndexWith(index, {3, 4, 1, 4});
  EXPECT_EQ(second.unique_keys, (std::vector<uint64_t>{3, 4, 1}));
  EXPECT_EQ(second.rows, (std::vector<uint32_t>{0, 1, 2, 1}));
  const Indexed empty = IndexWith(index, {});
  EXPECT_TRUE(empty.unique_keys.empty());
}

TEST(KeyIndexTest, GrowsForALargerBatchAndKeepsItsRoom) {
  KeyIndex index;
  IndexWith(index, {1, 2, 3});
  const size_t small = index.capacity();
  EXPECT_GE(small, 6u);
  std::vector<uint64_t> keys(5000);
  for (size_t k = 0; k < keys.size(); ++k) keys[k] = k * 1000003;
  ExpectAsByMap(keys, IndexWith(index, keys));
  EXPECT_GE(index.capacity(), 2 * keys.size());
  const size_t large = index.capacity();
  ExpectAsByMap({5, 6, 5}, IndexWith(index, {5, 6, 5}));
  EXPECT_EQ(index.capacity(), large);
}

}  // namespace
}  // namespace strata
