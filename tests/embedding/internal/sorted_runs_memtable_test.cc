// The store's memtable, inside a real RocksDB on disk: whatever order the
// writes come in (one run, a few runs, no order, keys written again), reads
// of the live memtable, point lookups and the flushed SST file (whose key
// order RocksDB checks at the flush) all give the latest value of each key.

#include "embedding/internal/sorted_runs_memtable.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace strata {
namespace embedding_internal {
namespace {

// Keys as the store writes them: big-endian, so that byte order is number
// order.
std::string KeyOf(uint64_t number) {
  std::string key(8, '\0');
  for (int b = 0; b < 8; ++b)
    key[b] = static_cast<char>(number >> (56 - 8 * b));
  return key;
}

class SortedRunsMemTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "strata_memtable_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    rocksdb::Options options;
    options.create_if_missing = true;
    options.memtable_factory = std::make_shared<SortedRunsMemTableFactory>();
    options.allow_concurrent_memtable_write = false;
    options.check_flush_compaction_key_order = true;
    options.paranoid_checks = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir_, &db).ok());
    db_.reset(db);
  }

  void TearDown() override {
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Writes `numbers` in that order, `per_batch` to a batch, each with a
  // value naming the write, and notes the latest value of each key.
  void Write(const std::vector<uint64_t>& numbers, size_t per_batch = 100) {
    rocksdb::WriteBatch batch;
    for (uint64_t number : numbers) {
      const std::string value = absl::StrCat(number, "@", writes_++);
      ASSERT_TRUE(batch.Put(KeyOf(number), value).ok());
      expected_[KeyOf(number)] = value;
      if (batch.Count() == per_batch) {
        ASSERT_TRUE(db_->Write(rocksdb::WriteOptions(), &batch).ok());
        batch.Clear();
      }
    }
    ASSERT_TRUE(db_->Write(rocksdb::WriteOptions(), &batch).ok());
  }

  // Every way of reading agrees with what was written.
  void ExpectAllReadsAgree() {
    std::map<std::string, std::string> forward;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      forward[it->key().ToString()] = it->value().ToString();
    }
    ASSERT_TRUE(it->status().ok());
    EXPECT_EQ(forward, expected_);

    std::vector<std::string> backward;
    for (it->SeekToLast(); it->Valid(); it->Prev()) {
      backward.push_back(it->key().ToString());
    }
    std::vector<std::string> keys;
    for (const auto& [key, value] : expected_) keys.push_back(key);
    std::reverse(keys.begin(), keys.end());
    EXPECT_EQ(backward, keys);

    // A point lookup in a memtable still written orders a copy of it, so
    // only some keys are looked up.
    const size_t step = std::max<size_t>(1, expected_.size() / 100);
    size_t i = 0;
    for (const auto& [key, value] : expected_) {
      if (i++ % step != 0) continue;
      std::string stored;
      ASSERT_TRUE(db_->Get(rocksdb::ReadOptions(), key, &stored).ok());
      EXPECT_EQ(stored, value);
    }
    if (expected_.empty()) return;
    // Seeks land on the first key at or after the target, and
    // SeekForPrev on the last at or before it.
    const uint64_t middle = SmallestMissingAfterMiddle();
    it->Seek(KeyOf(middle));
    auto after = expected_.lower_bound(KeyOf(middle));
    ASSERT_EQ(it->Valid(), after != expected_.end());
    if (it->Valid()) {
      EXPECT_EQ(it->key().ToString(), after->first);
    }
    it->SeekForPrev(KeyOf(middle));
    ASSERT_TRUE(it->Valid());
    EXPECT_EQ(it->key().ToString(), std::prev(after)->first);
  }

  // A number not written, between written ones.
  uint64_t SmallestMissingAfterMiddle() const {
    auto middle = expected_.begin();
    std::advance(middle, expected_.size() / 2);
    uint64_t number = 0;
    for (int b = 0; b < 8; ++b) {
      number = number << 8 | static_cast<unsigned char>(middle->first[b]);
    }
    while (expected_.count(KeyOf(number)) > 0) ++number;
    return number;
  }

  void FlushAndExpectAllReadsAgree() {
    SCOPED_TRACE("read from the memtable");
    ExpectAllReadsAgree();
    rocksdb::FlushOptions wait;
    wait.wait = true;
    ASSERT_TRUE(db_->Flush(wait).ok());
    std::string files;
    ASSERT_TRUE(db_->GetProperty("rocksdb.num-files-at-level0", &files));
    EXPECT_NE(files, "0");
    SCOPED_TRACE("read from the flushed file");
    ExpectAllReadsAgree();
  }

  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::map<std::string, std::string> expected_;
  uint64_t writes_ = 0;
};

std::vector<uint64_t> Range(uint64_t first, uint64_t count, uint64_t step) {
  std::vector<uint64_t> numbers;
  for (uint64_t i = 0; i < count; ++i) numbers.push_back(first + i * step);
  return numbers;
}

TEST_F(SortedRunsMemTableTest, OneAscendingRun) {
  Write(Range(1000, 5000, 3));
  FlushAndExpectAllReadsAgree();
}

TEST_F(SortedRunsMemTableTest, DescendingKeysAreAsManyRunsAsKeys) {
  std::vector<uint64_t> numbers = Range(1000, 3000, 2);
  std::reverse(numbers.begin(), numbers.end());
  Write(numbers);
  FlushAndExpectAllReadsAgree();
}

TEST_F(SortedRunsMemTableTest, AFewRunsThatOverlap) {
  // Five flushes' worth of rows, each in key order, overlapping in keys and
  // rewriting some: five runs, merged.
  for (uint64_t run = 0; run < 5; ++run) Write(Range(run * 7, 2000, 5));
  FlushAndExpectAllReadsAgree();
}

TEST_F(SortedRunsMemTableTest, KeysInNoOrderAreSorted) {
  std::vector<uint64_t> numbers = Range(0, 20000, 1);
  for (uint64_t i = 0; i < 5000; ++i) numbers.push_back(i * 4);  // rewrites
  std::shuffle(numbers.begin(), numbers.end(), std::mt19937_64(7));
  Write(numbers);
  FlushAndExpectAllReadsAgree();
}

TEST_F(SortedRunsMemTableTest, RunsAroundTheMergeLimitAgree) {
  // Just under and just over the limit past which runs are sorted.
  for (size_t runs : {SortedRunsMemTableFactory::kMaxRunsToMerge,
                      SortedRunsMemTableFactory::kMaxRunsToMerge + 1}) {
    SCOPED_TRACE(absl::StrFormat("%d runs", runs));
    for (uint64_t run = 0; run < runs; ++run) {
      Write(Range(runs * 100000 + run, 50, runs));
    }
    FlushAndExpectAllReadsAgree();
  }
}

TEST_F(SortedRunsMemTableTest, ReadsWhileWritesGoOnSeeASnapshot) {
  Write(Range(0, 1000, 2));
  const rocksdb::Snapshot* snapshot = db_->GetSnapshot();
  const std::map<std::string, std::string> before = expected_;
  Write(Range(1, 1000, 2));
  Write(Range(0, 500, 4));  // rewrites of the first run
  rocksdb::ReadOptions at_snapshot;
  at_snapshot.snapshot = snapshot;
  std::map<std::string, std::string> seen;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(at_snapshot));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    seen[it->key().ToString()] = it->value().ToString();
  }
  it.reset();
  db_->ReleaseSnapshot(snapshot);
  EXPECT_EQ(seen, before);
  FlushAndExpectAllReadsAgree();
}

TEST_F(SortedRunsMemTableTest, AnEmptyMemTableReadsEmpty) {
  ExpectAllReadsAgree();
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid());
  it->SeekToLast();
  EXPECT_FALSE(it->Valid());
}

}  // namespace
}  // namespace embedding_internal
}  // namespace strata
