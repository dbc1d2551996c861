#include "embedding/change_log.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;

// A record with `rows` rows of dimension 4 of table "t".
ChangeLog::Filler Rows(size_t rows) {
  return [rows](ChangeRecord& record) {
    ChangedRows changed;
    changed.table = "t";
    changed.dim = 4;
    for (size_t i = 0; i < rows; ++i) changed.keys.push_back(i);
    changed.values.assign(rows * 4, 1.0f);
    record.rows.push_back(std::move(changed));
  };
}

std::vector<uint64_t> Sequences(
    const std::vector<std::shared_ptr<const ChangeRecord>>& records) {
  std::vector<uint64_t> out;
  for (const auto& record : records) out.push_back(record->sequence);
  return out;
}

TEST(ChangeLogTest, NumbersRecordsFromOneAndReadsThemInOrder) {
  ChangeLog log(1 << 20, Clock::Real());
  EXPECT_EQ(log.latest_sequence(), 0u);
  EXPECT_NE(log.incarnation(), 0u);
  EXPECT_EQ(log.Append(Rows(1)), 1u);
  EXPECT_EQ(log.Append(Rows(2)), 2u);
  EXPECT_EQ(log.Append(Rows(3)), 3u);
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  ASSERT_THAT(log.ReadAfter(1, 10, &records), IsOk());
  EXPECT_EQ(Sequences(records), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(records[1]->rows[0].keys.size(), 3u);
}

// A filler as pushes fill records: rows only when the log is followed.
ChangeLog::Filler RowsWhenFollowed(size_t rows, std::vector<bool>* followed) {
  return [rows, followed](ChangeRecord& record) {
    followed->push_back(record.followed);
    if (!record.followed) {
      record.rows_left_out = true;
      return;
    }
    Rows(rows)(record);
  };
}

TEST(ChangeLogTest, RecordsBeforeTheFirstReaderLeaveRowsOutAndAreNeverRead) {
  ChangeLog log(1 << 20, Clock::Real());
  std::vector<bool> followed;
  EXPECT_EQ(log.Append(Rows(1)), 1u);  // A table creation, say: kept.
  EXPECT_EQ(log.Append(RowsWhenFollowed(2, &followed)), 2u);
  EXPECT_EQ(log.Append(RowsWhenFollowed(2, &followed)), 3u);
  EXPECT_EQ(log.latest_sequence(), 3u);
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  // Nothing before a record without rows can be replayed past it.
  EXPECT_THAT(log.ReadAfter(0, 10, &records),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(log.ReadAfter(2, 10, &records),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_TRUE(records.empty());

  log.NoteReader();
  EXPECT_EQ(log.Append(RowsWhenFollowed(2, &followed)), 4u);
  EXPECT_EQ(log.Append(RowsWhenFollowed(3, &followed)), 5u);
  EXPECT_EQ(followed, std::vector<bool>({false, false, true, true}));
  // A reader that took a snapshot at 3 reads every later record, with rows.
  ASSERT_THAT(log.ReadAfter(3, 10, &records), IsOk());
  ASSERT_EQ(Sequences(records), std::vector<uint64_t>({4, 5}));
  EXPECT_EQ(records[0]->rows.at(0).keys.size(), 2u);
  EXPECT_EQ(records[1]->rows.at(0).keys.size(), 3u);
}

TEST(ChangeLogTest, ReadAfterHonoursTheRecordLimit) {
  ChangeLog log(1 << 20, Clock::Real());
  for (int i = 0; i < 10; ++i) log.Append(Rows(1));
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  ASSERT_THAT(log.ReadAfter(0, 4, &records), IsOk());
  EXPECT_EQ(Sequences(records), (std::vector<uint64_t>{1, 2, 3, 4}));
}

TEST(ChangeLogTest, ReadAtTheLatestSequenceReturnsNothing) {
  ChangeLog log(1 << 20, Clock::Real());
  log.Append(Rows(1));
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  ASSERT_THAT(log.ReadAfter(1, 10, &records), IsOk());
  EXPECT_TRUE(records.empty());
}

TEST(ChangeLogTest, ReadPastTheLatestSequenceIsOutOfRange) {
  ChangeLog log(1 << 20, Clock::Real());
  log.Append(Rows(1));
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  EXPECT_THAT(log.ReadAfter(5, 10, &records),
              StatusIs(absl::StatusCode::kOutOfRange,
                       ::testing::HasSubstr("past the shard's latest")));
}

TEST(ChangeLogTest, OldRecordsAreDroppedPastTheByteBudget) {
  // Each record of 100 rows holds 100 * (8 + 16) bytes plus overhead.
  ChangeLog log(10000, Clock::Real());
  for (int i = 0; i < 20; ++i) log.Append(Rows(100));
  std::vector<std::shared_ptr<const ChangeRecord>> records;
  EXPECT_THAT(log.ReadAfter(0, 100, &records),
              StatusIs(absl::StatusCode::kOutOfRange,
                       ::testing::HasSubstr("no longer kept")));
  records.clear();
  ASSERT_THAT(log.ReadAfter(19, 100, &records), IsOk());
  EXPECT_EQ(Sequences(records), (std::vector<uint64_t>{20}));
}

TEST(ChangeLogTest, NewIncarnationForgetsRecords) {
  ChangeLog log(1 << 20, Clock::Real());
  log.Append(Rows(1));
  const uint64_t before = log.incarnation();
  log.StartNewIncarnation();
  EXPECT_NE(log.incarnation(), before);
  EXPECT_EQ(log.latest_sequence(), 0u);
  EXPECT_EQ(log.Append(Rows(1)), 1u);
}

TEST(ChangeLogTest, WaitForChangeReturnsOnAppendOrDeadline) {
  ChangeLog log(1 << 20, Clock::Real());
  EXPECT_FALSE(log.WaitForChange(0, absl::Now() + absl::Milliseconds(10)));
  log.Append(Rows(1));
  EXPECT_TRUE(log.WaitForChange(0, absl::Now() + absl::Seconds(10)));
}

TEST(ChangeLogTest, HeldRecordsStayUnreadUntilPublished) {
  ChangeLog log(1 << 20, Clock::Real(), /*hold_until_published=*/true);
  EXPECT_EQ(log.Append(Rows(1)), 1u);
  EXPECT_EQ(log.Append(Rows(1)), 2u);
  EXPECT_EQ(log.appended_sequence(), 2u);
  EXPECT_EQ(log.latest_sequence(), 0u);
  std::vector<std::shared_ptr<const ChangeRecord>> read;
  ASSERT_THAT(log.ReadAfter(0, 10, &read), IsOk());
  EXPECT_TRUE(read.empty());
  EXPECT_FALSE(log.WaitForChange(0, absl::Now() + absl::Milliseconds(10)));

  log.Publish(1);
  EXPECT_EQ(log.latest_sequence(), 1u);
  ASSERT_THAT(log.ReadAfter(0, 10, &read), IsOk());
  EXPECT_EQ(Sequences(read), std::vector<uint64_t>({1}));
  EXPECT_THAT(log.ReadAfter(1, 10, &read), IsOk());
  EXPECT_THAT(log.ReadAfter(2, 10, &read),
              StatusIs(absl::StatusCode::kOutOfRange));

  // Never past what was appended, never backwards.
  log.Publish(99);
  EXPECT_EQ(log.latest_sequence(), 2u);
  log.Publish(1);
  EXPECT_EQ(log.latest_sequence(), 2u);
  EXPECT_TRUE(log.WaitForChange(1, absl::Now() + absl::Seconds(10)));
  read.clear();
  ASSERT_THAT(log.ReadAfter(0, 10, &read), IsOk());
  EXPECT_EQ(Sequences(read), std::vector<uint64_t>({1, 2}));
}

}  // namespace
}  // namespace strata
