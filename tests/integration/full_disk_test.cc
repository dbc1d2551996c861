// A training shard on a real full filesystem: a small tmpfs mounted by the
// test (needs root; skipped otherwise), filled up by a file of the test's.
// The shard must refuse pushes with RESOURCE_EXHAUSTED naming the disk,
// never apply a refused push, keep answering pulls, start (read-only) when
// restarted on the full disk, and take writes again by itself once the
// file is removed, with every acknowledged push there after kill -9 and a
// restart.
//
// Push i adds its own gradient to keys of its own (SGD, learning rate 1,
// zeros init), so each row tells whether its push was applied.

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait_until.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;
using ::strata::testing::WaitUntil;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTable[] = "rows";
constexpr uint32_t kDim = 16;
constexpr int kKeysPerPush = 64;
// Pushes tried after the disk is full before the test gives up on a
// refusal: each adds a WAL record of about 8 KiB.
constexpr int kMaxPushesIntoAFullDisk = 2000;

std::vector<uint64_t> KeysOf(int push) {
  std::vector<uint64_t> keys;
  for (int k = 0; k < kKeysPerPush; ++k) {
    keys.push_back(static_cast<uint64_t>(push) * kKeysPerPush + k + 1);
  }
  return keys;
}

// Push i's gradient, the same for each of its elements.
float GradientOf(int push) { return -static_cast<float>(push % 97 + 1); }

class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
    disk_ = absl::StrCat(dir_.path(), "/disk");
    ASSERT_EQ(mkdir(disk_.c_str(), 0700), 0) << std::strerror(errno);
    // Room for RocksDB to resume once the filler is gone: its
    // SstFileManager waits for free space past its write buffers.
    if (mount("tmpfs", disk_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              "size=48m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
    }
    mounted_ = true;
    ServerProcessOptions options;
    options.data_dir = absl::StrCat(disk_, "/shard");
    // Small write buffers: RocksDB preallocates about that much of its log,
    // which the pushes must get through before the disk shows full.
    options.flags = {"--durability=group", "--write_buffer_mb=4"};
    server_ = std::make_unique<ServerProcess>(options);
  }

  void TearDown() override {
    server_.reset();
    if (mounted_) umount2(disk_.c_str(), MNT_DETACH);
  }

  std::unique_ptr<PsClient> Client() {
    PsClientOptions options;
    options.shard_addresses = {server_->address()};
    // A refusal comes back after a short retry: the test tells refused
    // pushes from acknowledged ones.
    options.retry_deadline = absl::Seconds(1);
    options.rpc_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<PsClient>> client =
        PsClient::Create(options);
    EXPECT_THAT(client.status(), IsOk());
    return client.ok() ? std::move(*client) : nullptr;
  }

  absl::Status Push(PsClient& client, int push) {
    return client.Push(
        kTable, KeysOf(push),
        std::vector<float>(kKeysPerPush * kDim, GradientOf(push)));
  }

  // Pushes whose rows are wrong: an acknowledged push must be there
  // (each element -gradient), a refused one must not (zeros).
  int WrongPushes(PsClient& client, const std::vector<int>& acknowledged,
                  const std::vector<int>& refused) {
    int wrong = 0;
    auto check = [&](int push, float expected) {
      std::vector<float> rows(kKeysPerPush * kDim);
      absl::Status pulled =
          client.Pull(kTable, KeysOf(push), absl::MakeSpan(rows));
      EXPECT_THAT(pulled, IsOk());
      for (float value : rows) {
        if (value != expected) {
          ++wrong;
          return;
        }
      }
    };
    for (int push : acknowledged) check(push, -GradientOf(push));
    for (int push : refused) check(push, 0.0f);
    return wrong;
  }

  // Writes a file until the filesystem has no room left.
  void FillTheDisk() {
    std::ofstream filler(Filler(), std::ios::binary | std::ios::app);
    const std::string block(1 << 16, 'x');
    while (filler.write(block.data(), block.size()) && filler.flush()) {
    }
  }
  std::string Filler() const { return absl::StrCat(disk_, "/filler"); }

  TempDir dir_{"full_disk"};
  std::string disk_;
  bool mounted_ = false;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(FullDiskTest, RefusesWritesKeepsReadsStartsReadOnlyAndRecovers) {
  ASSERT_THAT(server_->Start(), IsOk());
  std::unique_ptr<PsClient> client = Client();
  ASSERT_NE(client, nullptr);
  v1::TableConfig table;
  table.set_name(kTable);
  table.set_dim(kDim);
  table.mutable_initializer()->set_type(v1::ZEROS);
  table.mutable_optimizer()->set_type(v1::SGD);
  table.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_THAT(client->CreateTable(table), IsOk());

  std::vector<int> acknowledged, refused;
  int next = 0;
  for (; next < 20; ++next) {
    ASSERT_THAT(Push(*client, next), IsOk());
    acknowledged.push_back(next);
  }

  // The disk fills up: pushes are refused, naming it, and none is applied.
  FillTheDisk();
  absl::Status refusal;
  for (int tries = 0; tries < kMaxPushesIntoAFullDisk; ++tries, ++next) {
    refusal = Push(*client, next);
    if (!refusal.ok()) {
      refused.push_back(next++);
      break;
    }
    acknowledged.push_back(next);
  }
  ASSERT_THAT(refusal, StatusIs(absl::StatusCode::kResourceExhausted,
                                HasSubstr("full")));
  // Three more. The shard's periodic flush deletes the push log's older
  // segments, and the client retries a refused push for a while, so a push
  // can find room and be acknowledged: what counts is that each is either
  // refused and absent or acknowledged and applied once. Refilling first
  // keeps most of them refused (the first refusal is asserted above).
  for (int more = 0; more < 3; ++more, ++next) {
    FillTheDisk();
    if (Push(*client, next).ok()) {
      acknowledged.push_back(next);
    } else {
      refused.push_back(next);
    }
  }
  EXPECT_EQ(WrongPushes(*client, acknowledged, refused), 0);

  // Killed and restarted on the full disk: it starts, read-only.
  ASSERT_THAT(server_->Kill9(), IsOk());
  FillTheDisk();  // What the killed process's files had freed, if anything.
  ASSERT_THAT(server_->StartOnSamePort(), IsOk());
  EXPECT_EQ(WrongPushes(*client, acknowledged, refused), 0);
  EXPECT_THAT(Push(*client, next),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AnyOf(HasSubstr("read-only"), HasSubstr("full"))));
  refused.push_back(next++);

  // Space is freed: writes resume by themselves; the first push that
  // goes through is applied once.
  ASSERT_EQ(unlink(Filler().c_str()), 0) << std::strerror(errno);
  const int after_recovery = next++;
  EXPECT_TRUE(WaitUntil([&] { return Push(*client, after_recovery).ok(); },
                        absl::Seconds(60), absl::Milliseconds(200)))
      << server_->log();
  acknowledged.push_back(after_recovery);
  EXPECT_EQ(WrongPushes(*client, acknowledged, refused), 0);

  // Every acknowledged push survives kill -9 and a restart.
  ASSERT_THAT(server_->Kill9(), IsOk());
  ASSERT_THAT(server_->StartOnSamePort(), IsOk());
  EXPECT_EQ(WrongPushes(*client, acknowledged, refused), 0);
  std::cout << acknowledged.size() << " pushes acknowledged, " << refused.size()
            << " refused" << std::endl;
}

}  // namespace
}  // namespace strata
