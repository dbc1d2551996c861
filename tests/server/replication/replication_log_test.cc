#include "server/replication/replication_log.h"

#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

ReplicationEntryPtr Entry(uint64_t term, uint64_t sequence,
                          size_t payload_keys = 0) {
  auto entry = std::make_shared<v1::ReplicationEntry>();
  entry->set_term(term);
  entry->set_sequence(sequence);
  v1::TableBatch* batch = entry->mutable_push()->add_batches();
  for (size_t k = 0; k < payload_keys; ++k) batch->add_keys(k);
  return entry;
}

absl::Time Soon() { return absl::Now() + absl::Milliseconds(50); }

TEST(ReplicationLogTest, ReadsEntriesAfterASequence) {
  ReplicationLog log(1 << 20);
  log.Reset({3, 10});
  for (uint64_t s = 11; s <= 14; ++s) log.Append(Entry(4, s));
  EXPECT_EQ(log.last(), (ReplicationPosition{4, 14}));
  std::vector<ReplicationEntryPtr> read = log.ReadAfter(11, 2, Soon());
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0]->sequence(), 12u);
  EXPECT_EQ(read[1]->sequence(), 13u);
  EXPECT_TRUE(log.ReadAfter(14, 10, Soon()).empty());
}

TEST(ReplicationLogTest, FollowerContinuesOnlyFromAMatchingEntry) {
  ReplicationLog log(1 << 20);
  log.Reset({3, 10});
  log.Append(Entry(4, 11));
  EXPECT_TRUE(log.CanContinueFrom({3, 10}));   // the base
  EXPECT_TRUE(log.CanContinueFrom({4, 11}));   // a kept entry
  EXPECT_FALSE(log.CanContinueFrom({3, 11}));  // same sequence, other term
  EXPECT_FALSE(log.CanContinueFrom({4, 12}));  // ahead of the log
  EXPECT_FALSE(log.CanContinueFrom({3, 9}));   // before the base
}

TEST(ReplicationLogTest, ByteBudgetDropsTheOldestButKeepsTheNewest) {
  ReplicationLog log(200);
  for (uint64_t s = 1; s <= 20; ++s) log.Append(Entry(1, s, 20));
  EXPECT_EQ(log.last().sequence, 20u);
  EXPECT_FALSE(log.CanContinueFrom({0, 0}));
  EXPECT_TRUE(log.CanContinueFrom({1, 19}));
  // What was dropped cannot be read.
  EXPECT_TRUE(log.ReadAfter(1, 10, Soon()).empty());
}

TEST(ReplicationLogTest, ReadWaitsForTheNextEntry) {
  ReplicationLog log(1 << 20);
  std::thread appender([&] {
    absl::SleepFor(absl::Milliseconds(30));
    log.Append(Entry(1, 1));
  });
  std::vector<ReplicationEntryPtr> read =
      log.ReadAfter(0, 10, absl::Now() + absl::Seconds(10));
  appender.join();
  ASSERT_EQ(read.size(), 1u);
}

TEST(ReplicationLogTest, AcknowledgementsCountPerTerm) {
  ReplicationLog log(1 << 20);
  log.StartTerm(7);
  log.Acknowledge("a", 7, 5);
  log.Acknowledge("b", 6, 9);  // an old term's: ignored
  EXPECT_TRUE(log.WaitForAcks(7, 5, 1, Soon()));
  EXPECT_FALSE(log.WaitForAcks(7, 5, 2, Soon()));
  log.Acknowledge("b", 7, 4);
  EXPECT_FALSE(log.WaitForAcks(7, 5, 2, Soon()));
  log.Acknowledge("b", 7, 6);
  EXPECT_TRUE(log.WaitForAcks(7, 5, 2, Soon()));
  EXPECT_THAT(
      log.acknowledged(),
      ::testing::ElementsAre(::testing::Pair("a", 5), ::testing::Pair("b", 6)));
}

TEST(ReplicationLogTest, NewTermWakesWaitersWithoutAcknowledging) {
  ReplicationLog log(1 << 20);
  log.StartTerm(7);
  std::thread stepper([&] {
    absl::SleepFor(absl::Milliseconds(30));
    log.StartTerm(0);
  });
  const absl::Time start = absl::Now();
  EXPECT_FALSE(log.WaitForAcks(7, 1, 1, absl::Now() + absl::Seconds(30)));
  stepper.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace strata
