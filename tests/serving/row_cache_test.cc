// RowCache, the serving store's cache of rows: hits, the bound on its size,
// CLOCK's second chance, and writes and clears that reach cached rows.

#include "serving/internal/row_cache.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace serving_internal {
namespace {

constexpr TableId kTable = 3;
constexpr size_t kDim = 2;

class RowCacheTest : public ::testing::Test {
 protected:
  // Looks `key` up; true and its row in *row on a hit, else offers
  // {key, key} as read from disk and returns false.
  bool Read(RowCache& cache, FeatureId key, std::vector<float>* row) {
    row->assign(kDim, -1.0f);
    std::vector<size_t> misses;
    std::vector<uint64_t> tickets;
    cache.GetMany(kTable, {&key, 1}, kDim, absl::MakeSpan(*row), misses,
                  tickets);
    if (misses.empty()) return true;
    const std::vector<float> disk(kDim, static_cast<float>(key));
    cache.Offer({kTable, key}, tickets[0], disk);
    return false;
  }
  bool Hit(RowCache& cache, FeatureId key) {
    std::vector<float> row;
    return Read(cache, key, &row);
  }
};

TEST_F(RowCacheTest, AnOfferedRowIsHitWithItsValues) {
  RowCache cache(1000);
  std::vector<float> row;
  EXPECT_FALSE(Read(cache, 42, &row));
  ASSERT_TRUE(Read(cache, 42, &row));
  EXPECT_EQ(row, std::vector<float>(kDim, 42.0f));
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(RowCacheTest, ContainsTellsCachedRowsOnly) {
  RowCache cache(1000);
  Hit(cache, 1);  // Offered, so cached.
  Hit(cache, 2);
  const std::vector<float> row(kDim, 5.0f);
  // A delete of 2 takes it out of the cache.
  const std::vector<CachedWrite> erase = {{{kTable, 2}, {}}};
  std::vector<bool> was_cached;
  cache.BeginWrite(erase, was_cached);
  cache.EndWrite(erase, was_cached);
  const std::vector<CachedWrite> asked = {{{kTable, 1}, row},
                                          {{kTable, 2}, row},
                                          {{kTable, 3}, row},
                                          {{kTable + 1, 1}, row},
                                          {{kTable, 1}, row}};
  std::vector<bool> cached;
  cache.Contains(asked, cached);
  EXPECT_EQ(cached, (std::vector<bool>{true, false, false, false, true}));
  RowCache disabled(0);
  disabled.Contains(asked, cached);
  EXPECT_EQ(cached, std::vector<bool>(asked.size(), false));
}

TEST_F(RowCacheTest, NeverHoldsMoreThanItsCapacity) {
  // 128 rows over 64 stripes.
  RowCache cache(128);
  for (FeatureId key = 0; key < 5000; ++key) Hit(cache, key);
  EXPECT_LE(cache.size(), 128u);
  EXPECT_GT(cache.size(), 64u);
  // Whatever is cached holds its own key's values.
  std::vector<float> row;
  for (FeatureId key = 0; key < 5000; ++key) {
    if (Read(cache, key, &row)) {
      EXPECT_EQ(row, std::vector<float>(kDim, static_cast<float>(key)));
    }
  }
}

TEST_F(RowCacheTest, HoldsAsManyRowsAsItsCapacityHoweverTheyHash) {
  // 64 stripes: a thousand keys fall unevenly among them, and a cache of
  // a thousand rows keeps every one.
  RowCache cache(1000);
  for (FeatureId key = 0; key < 1000; ++key) Hit(cache, key);
  RowCacheStats stats = cache.Stats();
  EXPECT_EQ(stats.rows, 1000u);
  EXPECT_EQ(stats.evictions, 0u);
  for (FeatureId key = 0; key < 1000; ++key) EXPECT_TRUE(Hit(cache, key));
  // More rows than that: the cache stays full, never fuller.
  for (FeatureId key = 1000; key < 3000; ++key) Hit(cache, key);
  stats = cache.Stats();
  EXPECT_EQ(stats.rows, 1000u);
  EXPECT_EQ(stats.evictions, 2000u);
  // A clear gives every stripe's slots back, and they fill again.
  cache.BeginClear();
  cache.EndClear();
  EXPECT_EQ(cache.size(), 0u);
  for (FeatureId key = 5000; key < 6000; ++key) Hit(cache, key);
  EXPECT_EQ(cache.size(), 1000u);
}

TEST_F(RowCacheTest, ASmallCacheStillCachesInEveryStripe) {
  // Fewer rows than stripes: no stripe has a slot of its own, all share.
  RowCache cache(10);
  for (FeatureId key = 0; key < 10; ++key) Hit(cache, key);
  EXPECT_EQ(cache.size(), 10u);
  for (FeatureId key = 0; key < 10; ++key) EXPECT_TRUE(Hit(cache, key));
  // Beyond it a stripe that holds rows evicts one of its own, and one that
  // holds none caches nothing: the bound holds either way.
  for (FeatureId key = 10; key < 1000; ++key) Hit(cache, key);
  EXPECT_EQ(cache.size(), 10u);
}

TEST_F(RowCacheTest, StatsCountHitsMissesAndEvictions) {
  // 128 rows over 64 stripes.
  RowCache cache(128);
  EXPECT_EQ(cache.Stats().capacity, 128u);
  Hit(cache, 7);  // A miss, then cached.
  Hit(cache, 7);
  Hit(cache, 7);
  RowCacheStats stats = cache.Stats();
  EXPECT_EQ(stats.rows, 1u);
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.evictions, 0u);
  // 5000 more keys: each misses once; every row past the capacity pushes
  // one out.
  for (FeatureId key = 100; key < 5100; ++key) Hit(cache, key);
  stats = cache.Stats();
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 5001u);
  EXPECT_EQ(stats.rows, cache.size());
  EXPECT_EQ(stats.rows + stats.evictions, 5001u);
  // A disabled cache counts nothing.
  RowCache disabled(0);
  Hit(disabled, 7);
  EXPECT_EQ(disabled.Stats().misses, 0u);
  EXPECT_EQ(disabled.Stats().capacity, 0u);
}

TEST_F(RowCacheTest, RowsReadOftenStayWhileNewRowsComeIn) {
  // 64 stripes of about 32 rows, filled to evicting.
  RowCache cache(64 * 32);
  for (FeatureId key = 0; key < 20000; ++key) Hit(cache, key);
  // Read 60 rows again and again while new keys come in: a read sets a
  // row's bit, so the hand passes it by.
  std::vector<FeatureId> hot;
  for (FeatureId key = 10000; key < 10060; ++key) {
    Hit(cache, key);
    hot.push_back(key);
  }
  int hot_hits = 0;
  for (FeatureId fresh = 100000; fresh < 100400; ++fresh) {
    Hit(cache, fresh);
    for (FeatureId key : hot) hot_hits += Hit(cache, key) ? 1 : 0;
  }
  // 400 rounds of 60 reads; a hot row is lost only when its stripe's
  // hand finds its bit clear, which the reads keep setting.
  EXPECT_GT(hot_hits, 400 * 60 * 9 / 10);
}

TEST_F(RowCacheTest, WritesReplaceCachedRowsAndDeletesDropThem) {
  RowCache cache(1000);
  Hit(cache, 1);
  Hit(cache, 2);
  const std::vector<float> new_one(kDim, 10.0f);
  std::vector<CachedWrite> writes = {
      {{kTable, 1}, new_one}, {{kTable, 2}, {}}, {{kTable, 3}, new_one}};
  std::vector<bool> was_cached;
  cache.BeginWrite(writes, was_cached);
  EXPECT_EQ(was_cached, (std::vector<bool>{true, true, false}));
  cache.EndWrite(writes, was_cached);
  std::vector<float> row;
  ASSERT_TRUE(Read(cache, 1, &row));
  EXPECT_EQ(row, new_one);
  EXPECT_FALSE(Read(cache, 2, &row));  // Deleted: read from disk again.
  EXPECT_FALSE(Read(cache, 3, &row));  // Not cached before: not now.
  // A deleted row's slot is reused, not leaked.
  EXPECT_EQ(cache.size(), 3u);
}

TEST_F(RowCacheTest, AnOfferTakenBeforeAWriteIsDropped) {
  RowCache cache(1000);
  std::vector<float> row(kDim);
  std::vector<size_t> misses;
  std::vector<uint64_t> tickets;
  const FeatureId key = 7;
  cache.GetMany(kTable, {&key, 1}, kDim, absl::MakeSpan(row), misses, tickets);
  ASSERT_EQ(misses.size(), 1u);
  std::vector<CachedWrite> writes = {
      {{kTable, key}, std::vector<float>(kDim, 99.0f)}};
  std::vector<bool> was_cached;
  cache.BeginWrite(writes, was_cached);
  cache.EndWrite(writes, was_cached);
  // The value read before the write is older than what is on disk now.
  cache.Offer({kTable, key}, tickets[0], std::vector<float>(kDim, 1.0f));
  EXPECT_EQ(cache.size(), 0u);
}

TEST_F(RowCacheTest, AClearEmptiesEveryStripe) {
  RowCache cache(1000);
  for (FeatureId key = 0; key < 300; ++key) Hit(cache, key);
  ASSERT_GT(cache.size(), 0u);
  cache.BeginClear();
  cache.EndClear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(Hit(cache, 5));
  EXPECT_TRUE(Hit(cache, 5));
}

TEST_F(RowCacheTest, ALookupOfManyKeysCopiesEachCachedRowToItsPlace) {
  // Enough keys per stripe for GetMany's fetch-ahead pipeline to run in
  // full: every row it copies must be its own key's, wherever the key sits.
  RowCache cache(100000);
  for (FeatureId key = 0; key < 20000; key += 2) Hit(cache, key);
  std::vector<FeatureId> keys;
  for (FeatureId i = 0; i < 3000; ++i) keys.push_back((i * 7919) % 20000);
  keys.push_back(keys[5]);  // A repeated key gets its row twice.
  std::vector<float> out(keys.size() * kDim, -1.0f);
  std::vector<size_t> misses;
  std::vector<uint64_t> tickets;
  cache.GetMany(kTable, keys, kDim, absl::MakeSpan(out), misses, tickets);
  std::vector<bool> missed(keys.size(), false);
  for (size_t i : misses) missed[i] = true;
  EXPECT_EQ(tickets.size(), misses.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    // Even keys were cached, odd ones were not.
    ASSERT_EQ(missed[i], keys[i] % 2 == 1) << "key " << keys[i];
    if (missed[i]) continue;
    for (size_t d = 0; d < kDim; ++d) {
      ASSERT_EQ(out[i * kDim + d], static_cast<float>(keys[i]))
          << "key " << keys[i];
    }
  }
}

TEST_F(RowCacheTest, RowsOfTwoTablesWithTheSameKeysAreKeptApart) {
  constexpr TableId kOther = kTable + 1;
  RowCache cache(1000);
  for (FeatureId key = 0; key < 100; ++key) {
    Hit(cache, key);
    std::vector<float> row(kDim);
    std::vector<size_t> misses;
    std::vector<uint64_t> tickets;
    cache.GetMany(kOther, {&key, 1}, kDim, absl::MakeSpan(row), misses,
                  tickets);
    ASSERT_EQ(misses.size(), 1u);
    cache.Offer({kOther, key}, tickets[0],
                std::vector<float>(kDim, 1000.0f + static_cast<float>(key)));
  }
  EXPECT_EQ(cache.size(), 200u);
  // Deleting a row of one table leaves the other's row of that key.
  std::vector<CachedWrite> writes = {{{kOther, 5}, {}}};
  std::vector<bool> was_cached;
  cache.BeginWrite(writes, was_cached);
  cache.EndWrite(writes, was_cached);
  EXPECT_EQ(cache.size(), 199u);
  std::vector<float> row;
  ASSERT_TRUE(Read(cache, 5, &row));
  EXPECT_EQ(row, std::vector<float>(kDim, 5.0f));
  std::vector<FeatureId> keys = {4, 5, 6};
  std::vector<float> other(keys.size() * kDim);
  std::vector<size_t> misses;
  std::vector<uint64_t> tickets;
  cache.GetMany(kOther, keys, kDim, absl::MakeSpan(other), misses, tickets);
  EXPECT_EQ(misses, std::vector<size_t>{1});
  EXPECT_EQ(other[0], 1004.0f);
  EXPECT_EQ(other[2 * kDim], 1006.0f);
}

}  // namespace
}  // namespace serving_internal
}  // namespace strata
