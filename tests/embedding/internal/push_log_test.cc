// The push log of group durability: records come back in order and whole;
// a record cut short at a segment's end is skipped, a damaged one followed
// by others is refused; rotation and deletion keep what a flush has not
// covered; a failed append leaves the log usable.

#include "embedding/internal/push_log.h"

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fault_injection_fs.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace embedding_internal {
namespace {

using ::strata::testing::FaultInjectionFileSystem;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A push of `count` keys from `first` on, dim 3 and state 2; row floats are
// key * 10 + column + `bias`.
struct Push {
  Push(FeatureId first, size_t count, float bias, std::string client = "",
       uint64_t sequence = 0) {
    for (size_t i = 0; i < count; ++i) {
      keys.push_back(first + i);
      for (int c = 0; c < 5; ++c) {
        rows.push_back(static_cast<float>((first + i) * 10 + c) + bias);
      }
    }
    record.client_id = std::move(client);
    record.client_sequence = sequence;
    record.tables.push_back({7, 3, 2, keys, rows.data()});
  }
  std::vector<FeatureId> keys;
  std::vector<float> rows;
  PushLogRecord record;
};

// What Replay visited, copied out.
struct Replayed {
  std::vector<std::string> clients;
  std::vector<uint64_t> sequences;
  std::vector<std::vector<FeatureId>> keys;
  std::vector<std::vector<float>> rows;
  std::vector<ReplicationPosition> positions;
};

class PushLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "strata_push_log_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = root_ + "/push_log";
    env_ = faults_->NewEnv();
  }
  void TearDown() override {
    faults_->Heal();
    std::error_code error;
    std::filesystem::remove_all(root_, error);
  }

  absl::StatusOr<Replayed> Replay() {
    Replayed out;
    absl::Status s =
        PushLog::Replay(env_.get(), dir_, [&](const PushLogRecord& record) {
          out.clients.push_back(record.client_id);
          out.sequences.push_back(record.client_sequence);
          out.positions.push_back(record.replication);
          EXPECT_EQ(record.tables.size(), 1u);
          const PushLogRows& t = record.tables.at(0);
          EXPECT_EQ(t.table, 7u);
          EXPECT_EQ(t.dim, 3u);
          EXPECT_EQ(t.state_dim, 2u);
          out.keys.emplace_back(t.keys.begin(), t.keys.end());
          out.rows.emplace_back(t.rows, t.rows + t.keys.size() * 5);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return out;
  }

  std::vector<std::filesystem::path> Segments() {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  std::shared_ptr<FaultInjectionFileSystem> faults_ =
      std::make_shared<FaultInjectionFileSystem>();
  std::unique_ptr<rocksdb::Env> env_;
  std::string root_, dir_;
};

TEST_F(PushLogTest, RecordsComeBackWholeAndInOrder) {
  PushLog log(env_.get(), dir_);
  ASSERT_THAT(log.Start(), IsOk());
  EXPECT_TRUE(log.empty());
  Push a(1, 3, 0.5f, "trainer-0", 41), b(100, 1, 0.0f), c(2, 2, 9.0f, "x", 1);
  a.record.replication = {3, 17};
  ASSERT_THAT(log.Append(a.record), IsOk());
  ASSERT_THAT(log.Append(b.record), IsOk());
  log.Rotate();
  ASSERT_THAT(log.Append(c.record), IsOk());
  EXPECT_EQ(Segments().size(), 2u);
  EXPECT_GT(log.bytes(), (3 + 1 + 2) * (8 + 20));

  absl::StatusOr<Replayed> replayed = Replay();
  ASSERT_THAT(replayed, IsOk());
  EXPECT_THAT(replayed->clients, ElementsAre("trainer-0", "", "x"));
  EXPECT_THAT(replayed->sequences, ElementsAre(41, 0, 1));
  EXPECT_EQ(replayed->positions[0], (ReplicationPosition{3, 17}));
  EXPECT_EQ(replayed->keys[0], a.keys);
  EXPECT_EQ(replayed->rows[0], a.rows);
  EXPECT_EQ(replayed->keys[1], b.keys);
  EXPECT_EQ(replayed->rows[2], c.rows);
}

TEST_F(PushLogTest, DeleteBeforeKeepsTheSegmentsAfterTheCut) {
  PushLog log(env_.get(), dir_);
  ASSERT_THAT(log.Start(), IsOk());
  Push a(1, 2, 0.0f), b(5, 2, 0.0f);
  ASSERT_THAT(log.Append(a.record), IsOk());
  const uint64_t cut = log.Rotate();
  ASSERT_THAT(log.Append(b.record), IsOk());
  ASSERT_THAT(log.DeleteBefore(cut), IsOk());
  absl::StatusOr<Replayed> replayed = Replay();
  ASSERT_THAT(replayed, IsOk());
  ASSERT_EQ(replayed->keys.size(), 1u);
  EXPECT_EQ(replayed->keys[0], b.keys);
  ASSERT_THAT(log.DeleteBefore(log.Rotate()), IsOk());
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(log.bytes(), 0u);

  // A new process numbers its segments after those it finds.
  ASSERT_THAT(log.Append(a.record), IsOk());
  PushLog next(env_.get(), dir_);
  ASSERT_THAT(next.Start(), IsOk());
  EXPECT_FALSE(next.empty());
  ASSERT_THAT(next.Append(b.record), IsOk());
  replayed = Replay();
  ASSERT_THAT(replayed, IsOk());
  ASSERT_EQ(replayed->keys.size(), 2u);
  EXPECT_EQ(replayed->keys[1], b.keys);
}

TEST_F(PushLogTest, ARecordCutShortAtTheEndIsSkipped) {
  Push a(1, 4, 0.0f), b(9, 4, 0.0f);
  {
    PushLog log(env_.get(), dir_);
    ASSERT_THAT(log.Start(), IsOk());
    ASSERT_THAT(log.Append(a.record), IsOk());
    ASSERT_THAT(log.Append(b.record), IsOk());
  }
  const std::filesystem::path segment = Segments().at(0);
  const uintmax_t whole = std::filesystem::file_size(segment);
  // Every cut inside the second record, header included, as a process
  // killed inside its write leaves it.
  for (uintmax_t cut : {whole - 1, whole - 40, whole - 150}) {
    std::filesystem::resize_file(segment, cut);
    absl::StatusOr<Replayed> replayed = Replay();
    ASSERT_THAT(replayed, IsOk()) << "cut at " << cut;
    ASSERT_EQ(replayed->keys.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(replayed->rows[0], a.rows);
  }
}

TEST_F(PushLogTest, ADamagedRecordFollowedByOthersIsDataLoss) {
  Push a(1, 4, 0.0f), b(9, 4, 0.0f);
  {
    PushLog log(env_.get(), dir_);
    ASSERT_THAT(log.Start(), IsOk());
    ASSERT_THAT(log.Append(a.record), IsOk());
    ASSERT_THAT(log.Append(b.record), IsOk());
  }
  const std::filesystem::path segment = Segments().at(0);
  {
    std::fstream file(segment, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(PushLog::kHeaderBytes + 50);
    file.put('\x7f');
  }
  EXPECT_THAT(Replay(), StatusIs(absl::StatusCode::kDataLoss,
                                 HasSubstr("fails its checksum")));
}

TEST_F(PushLogTest, AFailedAppendIsReportedAndTheNextGoesToANewSegment) {
  PushLog log(env_.get(), dir_);
  ASSERT_THAT(log.Start(), IsOk());
  Push a(1, 2, 0.0f), b(5, 2, 0.0f), c(7, 2, 0.0f);
  ASSERT_THAT(log.Append(a.record), IsOk());
  faults_->FailWrites(0, /*no_space=*/true);
  EXPECT_THAT(log.Append(b.record),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("disk is full")));
  faults_->Heal();
  ASSERT_THAT(log.Append(c.record), IsOk());
  EXPECT_EQ(Segments().size(), 2u);
  absl::StatusOr<Replayed> replayed = Replay();
  ASSERT_THAT(replayed, IsOk());
  ASSERT_EQ(replayed->keys.size(), 2u);
  EXPECT_EQ(replayed->keys[0], a.keys);
  EXPECT_EQ(replayed->keys[1], c.keys);
}

}  // namespace
}  // namespace embedding_internal
}  // namespace strata
