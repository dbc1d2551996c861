// A table ten times larger than its memory budget on a real strata-server:
// pushes and pulls stay exact for sampled keys, and the process's peak
// resident memory stays within the budget plus the stated overhead.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/ps_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/sanitizers.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::kSanitized;
using ::strata::testing::ResidentMiB;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;

constexpr uint32_t kDim = 32;
constexpr uint64_t kRows = 2500000;  // 320 MB of values
constexpr uint64_t kBudgetMiB = 32;  // a tenth of it
constexpr uint64_t kWriteBufferMiB = 8;
constexpr uint64_t kBlockCacheMiB = 16;
constexpr uint64_t kChangeLogMiB = 16;
// What the budget does not cover: two memtables per column family, the
// block cache, the change log, and 48 MiB for the allocator, gRPC's buffers
// and RocksDB's index and filter blocks.
constexpr uint64_t kOverheadMiB =
    2 * kWriteBufferMiB * 3 + kBlockCacheMiB + kChangeLogMiB + 48;

// The gradient of `key` in dimension d: the row is its negation (SGD,
// learning rate 1, zeros), a value every key has its own of.
float Gradient(uint64_t key, uint32_t d) {
  return static_cast<float>((key * 31 + d) % 1000) / 1000.0f;
}

TEST(ColdTierMemoryTest, TenTimesTheBudgetStaysExactAndWithinMemory) {
  ServerProcessOptions options;
  options.flags = {
      "--durability=group", absl::StrCat("--write_buffer_mb=", kWriteBufferMiB),
      absl::StrCat("--block_cache_mb=", kBlockCacheMiB),
      absl::StrCat("--change_log_mb=", kChangeLogMiB), "--log_level=warning"};
  ServerProcess server(options);
  ASSERT_THAT(server.Start(), IsOk());
  absl::StatusOr<uint64_t> baseline = ResidentMiB(server.pid(), "VmRSS");
  ASSERT_THAT(baseline, IsOk());

  PsClientOptions client_options;
  client_options.shard_addresses = {server.address()};
  auto client = PsClient::Create(client_options);
  ASSERT_THAT(client, IsOk());
  v1::TableConfig config;
  config.set_name("big");
  config.set_dim(kDim);
  config.mutable_initializer()->set_type(v1::ZEROS);
  config.mutable_optimizer()->set_type(v1::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  config.set_memory_budget_bytes(kBudgetMiB << 20);
  ASSERT_THAT((*client)->CreateTable(config), IsOk());

  constexpr uint64_t kBatch = 8192;
  std::vector<uint64_t> keys;
  std::vector<float> gradients;
  for (uint64_t begin = 0; begin < kRows; begin += kBatch) {
    keys.clear();
    gradients.clear();
    for (uint64_t key = begin; key < std::min(kRows, begin + kBatch); ++key) {
      keys.push_back(key);
      for (uint32_t d = 0; d < kDim; ++d) gradients.push_back(Gradient(key, d));
    }
    ASSERT_THAT((*client)->Push("big", keys, gradients), IsOk()) << begin;
  }
  // A second push to sampled keys, hot and cold: each row's sum doubles.
  std::mt19937_64 random(5);
  std::vector<uint64_t> sample;
  for (int i = 0; i < 4096; ++i) sample.push_back(random() % kRows);
  std::sort(sample.begin(), sample.end());
  sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
  gradients.clear();
  for (uint64_t key : sample) {
    for (uint32_t d = 0; d < kDim; ++d) gradients.push_back(Gradient(key, d));
  }
  ASSERT_THAT((*client)->Push("big", sample, gradients), IsOk());

  // Sampled rows equal the reference; so do untouched ones, read in bulk
  // (uniform pulls fill the block cache, as a cold workload does).
  std::vector<float> rows(sample.size() * kDim);
  ASSERT_THAT((*client)->Pull("big", sample, absl::MakeSpan(rows)), IsOk());
  for (size_t i = 0; i < sample.size(); ++i) {
    for (uint32_t d = 0; d < kDim; ++d) {
      ASSERT_FLOAT_EQ(rows[i * kDim + d], -2 * Gradient(sample[i], d))
          << "key " << sample[i];
    }
  }
  for (int round = 0; round < 40; ++round) {
    keys.clear();
    for (uint64_t i = 0; i < kBatch; ++i) keys.push_back(random() % kRows);
    rows.assign(keys.size() * kDim, 0.0f);
    ASSERT_THAT((*client)->Pull("big", keys, absl::MakeSpan(rows)), IsOk());
    const uint64_t key = keys[round];
    const bool twice = std::binary_search(sample.begin(), sample.end(), key);
    EXPECT_FLOAT_EQ(rows[round * kDim + 3],
                    (twice ? -2 : -1) * Gradient(key, 3))
        << "key " << key;
  }

  absl::StatusOr<std::vector<v1::TableInfo>> tables = (*client)->ListTables();
  ASSERT_THAT(tables, IsOk());
  EXPECT_EQ(tables->at(0).num_rows(), kRows);
  EXPECT_LT(tables->at(0).rows_in_memory(), kRows / 10);
  EXPECT_LE(tables->at(0).memory_bytes(), kBudgetMiB << 20);

  absl::StatusOr<uint64_t> peak = ResidentMiB(server.pid(), "VmHWM");
  ASSERT_THAT(peak, IsOk());
  const uint64_t limit = *baseline + kBudgetMiB + kOverheadMiB;
  std::cout << "peak resident " << *peak << " MiB; started at " << *baseline
            << " MiB; limit " << limit << " MiB (budget " << kBudgetMiB
            << " + overhead " << kOverheadMiB << "); table "
            << kRows * kDim * sizeof(float) / (1 << 20) << " MiB\n";
  // Sanitizers add shadow memory and quarantines: the bound is for plain
  // builds.
  if (!kSanitized) {
    EXPECT_LE(*peak, limit);
  }
}

}  // namespace
}  // namespace strata
