// strata-worker's admission, eviction and memory-budget flags reach the
// shard's table, and a worker attaches to a table that exists with the same
// policies (one made by an earlier worker or by stratactl) instead of
// failing with ALREADY_EXISTS; other policies are an error naming the field.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/training_data.h"
#include "worker/data/datagen.h"

namespace strata {
namespace {

using ::strata::testing::GenerateLearnableData;
using ::strata::testing::IsOk;
using ::strata::testing::LearnableDataWorkerFlags;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;
using ::strata::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kTable[] = "policy_embeddings";
const std::vector<std::string> kPolicies = {"--admit_min_count=2",
                                            "--evict_after_steps=1000000",
                                            "--memory_budget_mb=2"};

class WorkerTablePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerProcessOptions options;
    options.flags = {"--durability=periodic"};
    shard_ = std::make_unique<ServerProcess>(options);
    ASSERT_THAT(shard_->Start(), IsOk());
    auto generated = GenerateLearnableData(dir_.path(), 20000, 2000);
    ASSERT_THAT(generated.status(), IsOk());
    data_ = *generated;
  }

  // Runs one worker of one rank for a few steps with `extra` flags; returns
  // its exit code, its log in *log.
  int RunWorker(const std::vector<std::string>& extra, std::string* log) {
    const int run = ++runs_;
    ServerProcessOptions options;
    options.binary = "strata-worker";
    options.daemon_flags = false;
    options.flags = LearnableDataWorkerFlags(
        data_, shard_->address(), 0, 1, absl::StrCat("job-", run),
        absl::StrCat(dir_.path(), "/result-", run, ".json"));
    options.flags.push_back(absl::StrCat("--table=", kTable));
    options.flags.push_back("--max_steps=20");
    options.flags.insert(options.flags.end(), extra.begin(), extra.end());
    ServerProcess worker(options);
    if (!worker.Launch().ok()) return -1;
    auto exit = worker.Wait(absl::Minutes(2));
    *log = worker.log();
    return exit.ok() ? exit->exit_code : -1;
  }

  absl::StatusOr<v1::TableInfo> Table() {
    PsClientOptions options;
    options.shard_addresses = {shard_->address()};
    auto client = PsClient::Create(options);
    if (!client.ok()) return client.status();
    auto tables = (*client)->ListTables();
    if (!tables.ok()) return tables.status();
    for (const v1::TableInfo& info : *tables) {
      if (info.config().name() == kTable) return info;
    }
    return absl::NotFoundError("no table");
  }

  TempDir dir_{"worker_table_policy"};
  std::unique_ptr<ServerProcess> shard_;
  DatagenResult data_;
  int runs_ = 0;
};

TEST_F(WorkerTablePolicyTest, PoliciesReachTheShardAndASecondWorkerAttaches) {
  std::string log;
  ASSERT_EQ(RunWorker(kPolicies, &log), 0) << log;
  auto table = Table();
  ASSERT_THAT(table.status(), IsOk());
  EXPECT_EQ(table->config().admit_min_count(), 2u);
  EXPECT_EQ(table->config().evict_after_steps(), 1000000u);
  EXPECT_EQ(table->config().memory_budget_bytes(), 2u << 20);
  // Admission at work: keys pushed once had their gradients dropped.
  EXPECT_GT(table->rejected_gradients(), 0u);
  EXPECT_GT(table->admitted_keys(), 0u);

  // The table exists now, with admission: the same flags attach to it.
  ASSERT_EQ(RunWorker(kPolicies, &log), 0) << log;
  auto again = Table();
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_GT(again->admitted_keys() + again->num_rows(), 0u);

  // Other policies: an error naming the field, not a silent retrain.
  std::vector<std::string> other = kPolicies;
  other[0] = "--admit_min_count=3";
  EXPECT_EQ(RunWorker(other, &log), 1);
  EXPECT_THAT(log, HasSubstr("already exists with another config"));
  EXPECT_THAT(log, HasSubstr("admit_min_count"));
}

TEST_F(WorkerTablePolicyTest, ABadPolicyIsRefusedNamingTheField) {
  std::string log;
  EXPECT_EQ(RunWorker({"--admit_probability=1.5"}, &log), 1);
  EXPECT_THAT(log, HasSubstr("admit_probability"));
}

}  // namespace
}  // namespace strata
