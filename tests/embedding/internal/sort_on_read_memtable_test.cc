#include "embedding/internal/sort_on_read_memtable.h"

#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "tests/testing/server_process.h"

namespace strata {
namespace embedding_internal {
namespace {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// Keys that probe every branch of the sort: empty, prefixes of each other,
// zero bytes at the end, exactly 8 and 16 bytes, longer than 16 with equal
// first 16 bytes, the store's 12-byte row keys, and high bytes.
std::vector<std::string> AwkwardKeys() {
  std::vector<std::string> keys = {"",
                                   std::string(1, '\0'),
                                   std::string(2, '\0'),
                                   "a",
                                   std::string("a\0", 2),
                                   "ab",
                                   "abcdefgh",
                                   std::string("abcdefgh\0", 9),
                                   "abcdefghijklmnop",
                                   "abcdefghijklmnopq",
                                   "abcdefghijklmnopr",
                                   std::string("abcdefghijklmnop\0", 17),
                                   "abcdefghijklmnopqrstuvwxyz",
                                   "\xff\xff\xff\xff\xff\xff\xff\xff\xff",
                                   "\x80"};
  std::mt19937_64 random(5);
  for (int i = 0; i < 3000; ++i) {
    std::string row_key(12, '\0');
    const uint64_t key = random() % 5000;  // repeats: several versions
    for (int b = 0; b < 8; ++b)
      row_key[4 + b] = static_cast<char>(key >> (56 - 8 * b));
    row_key[3] = static_cast<char>(1 + i % 3);
    keys.push_back(row_key);
  }
  return keys;
}

class SortOnReadMemTableTest : public ::testing::Test {
 protected:
  // Opens a database in `dir` with the memtable of `factory` (null: RocksDB's
  // skip list) and a memtable large enough that nothing is flushed unasked.
  std::unique_ptr<rocksdb::DB> Open(
      const std::string& dir,
      std::shared_ptr<rocksdb::MemTableRepFactory> factory) {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.write_buffer_size = 64 << 20;
    if (factory != nullptr) {
      options.memtable_factory = std::move(factory);
      options.allow_concurrent_memtable_write = false;
    }
    rocksdb::DB* db = nullptr;
    const rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return std::unique_ptr<rocksdb::DB>(db);
  }

  // Writes, overwrites and deletes the awkward keys, in a scrambled order
  // and in several batches (so that sequences interleave).
  void Fill(rocksdb::DB& db) {
    std::vector<std::string> keys = AwkwardKeys();
    std::shuffle(keys.begin(), keys.end(), std::mt19937(9));
    for (size_t start = 0; start < keys.size(); start += 500) {
      rocksdb::WriteBatch batch;
      for (size_t i = start; i < std::min(keys.size(), start + 500); ++i) {
        if (i % 17 == 0) {
          batch.Delete(keys[i]);
        } else {
          batch.Put(keys[i], "v" + std::to_string(i));
        }
      }
      ASSERT_TRUE(db.Write(rocksdb::WriteOptions(), &batch).ok());
    }
  }

  // Every live key and value, first to last (or last to first).
  static KeyValues Scan(rocksdb::DB& db, bool forward = true) {
    KeyValues all;
    std::unique_ptr<rocksdb::Iterator> it(
        db.NewIterator(rocksdb::ReadOptions()));
    for (forward ? it->SeekToFirst() : it->SeekToLast(); it->Valid();
         forward ? it->Next() : it->Prev()) {
      all.emplace_back(it->key().ToString(), it->value().ToString());
    }
    EXPECT_TRUE(it->status().ok());
    return all;
  }

  // Where Seek and SeekForPrev land for every awkward key and a few
  // between them ("" when not valid).
  static std::vector<std::string> Seeks(rocksdb::DB& db) {
    std::vector<std::string> landed;
    std::unique_ptr<rocksdb::Iterator> it(
        db.NewIterator(rocksdb::ReadOptions()));
    std::vector<std::string> targets = AwkwardKeys();
    targets.resize(200);
    targets.push_back("abcdefghijklmnopq0");
    targets.push_back("zzz");
    for (const std::string& target : targets) {
      it->Seek(target);
      landed.push_back(it->Valid() ? it->key().ToString() : "");
      it->SeekForPrev(target);
      landed.push_back(it->Valid() ? it->key().ToString() : "");
    }
    return landed;
  }

  testing::TempDir dir_{"sort_on_read_memtable"};
};

TEST_F(SortOnReadMemTableTest, ReadsAsTheSkipListMemtableDoes) {
  auto reference = Open(dir_.path() + "/skiplist", nullptr);
  auto db = Open(dir_.path() + "/sorted", NewSortOnReadMemTableFactory());
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(db, nullptr);
  Fill(*reference);
  Fill(*db);
  const KeyValues want = Scan(*reference);
  ASSERT_GT(want.size(), 2000u);

  // From the mutable memtable (a sorted copy per iterator), then from an
  // immutable one being flushed, then from the table file.
  EXPECT_EQ(Scan(*db), want);
  EXPECT_EQ(Scan(*db, /*forward=*/false), Scan(*reference, /*forward=*/false));
  EXPECT_EQ(Seeks(*db), Seeks(*reference));
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), want[7].first, &value).ok());
  EXPECT_EQ(value, want[7].second);
  ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  EXPECT_EQ(Scan(*db), want);
  EXPECT_EQ(Seeks(*db), Seeks(*reference));
}

TEST_F(SortOnReadMemTableTest, LogReplayedIntoItAfterACrashReadsTheSame) {
  const std::string path = dir_.path() + "/sorted";
  KeyValues want;
  {
    auto db = Open(path, NewSortOnReadMemTableFactory());
    ASSERT_NE(db, nullptr);
    Fill(*db);
    want = Scan(*db);
    // Closed without a flush: the rows are only in the write-ahead log.
  }
  auto db = Open(path, NewSortOnReadMemTableFactory());
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(Scan(*db), want);
  ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  db.reset();
  auto reopened = Open(path, nullptr);  // the files need no special memtable
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(Scan(*reopened), want);
}

}  // namespace
}  // namespace embedding_internal
}  // namespace strata
