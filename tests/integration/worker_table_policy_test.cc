// strata-worker's admission, eviction and memory-budget flags reach the
// shard's table, and a worker attaches to a table that exists with the same
// policies (one made by an earlier worker or by stratactl) instead of
// failing with ALREADY_EXISTS; other policies are an error naming the field.
// The same for the tables of a model config file (--model_config), each
// with policies of its own.

#include <fstream>
#include <map>
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

  absl::StatusOr<v1::TableInfo> Table(const std::string& name = kTable) {
    PsClientOptions options;
    options.shard_addresses = {shard_->address()};
    auto client = PsClient::Create(options);
    if (!client.ok()) return client.status();
    auto tables = (*client)->ListTables();
    if (!tables.ok()) return tables.status();
    for (const v1::TableInfo& info : *tables) {
      if (info.config().name() == name) return info;
    }
    return absl::NotFoundError(absl::StrCat("no table ", name));
  }

  // Writes `text` to a model config file; returns its --model_config flag.
  std::string ModelConfigFlag(const std::string& text) {
    const std::string path =
        absl::StrCat(dir_.path(), "/model-", ++model_configs_, ".yaml");
    std::ofstream(path) << text;
    return absl::StrCat("--model_config=", path);
  }

  TempDir dir_{"worker_table_policy"};
  std::unique_ptr<ServerProcess> shard_;
  DatagenResult data_;
  int runs_ = 0;
  int model_configs_ = 0;
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

// Users in one table (admission, a memory budget), ads in another
// (eviction, SGD), the context fields in a third with the flags' settings
// at a quarter of the model's width.
constexpr char kModelConfig[] = R"(tables:
  - name: users
    fields: [C1-C10]
    admit_min_count: 2
    memory_budget_mb: 2
  - name: ads
    fields: [C11-C20]
    optimizer: sgd
    learning_rate: 0.1
    evict_after_steps: 1000000
  - name: context
    fields: [C21-C26]
    dim: 4
)";

TEST_F(WorkerTablePolicyTest, AModelConfigsTablesGetTheirOwnPolicies) {
  std::string log;
  const std::string model_config = ModelConfigFlag(kModelConfig);
  ASSERT_EQ(RunWorker({model_config, "--evict_after_seconds=86400"}, &log), 0)
      << log;
  auto users = Table("users");
  auto ads = Table("ads");
  auto context = Table("context");
  ASSERT_THAT(users.status(), IsOk());
  ASSERT_THAT(ads.status(), IsOk());
  ASSERT_THAT(context.status(), IsOk());
  EXPECT_EQ(users->config().admit_min_count(), 2u);
  EXPECT_EQ(users->config().memory_budget_bytes(), 2u << 20);
  EXPECT_EQ(users->config().optimizer().type(), v1::ADAM);  // the flag's
  EXPECT_GT(users->rejected_gradients(), 0u);               // admission at work
  EXPECT_EQ(ads->config().optimizer().type(), v1::SGD);
  EXPECT_FLOAT_EQ(ads->config().optimizer().learning_rate(), 0.1f);
  EXPECT_EQ(ads->config().evict_after_steps(), 1000000u);
  EXPECT_EQ(ads->config().admit_min_count(), 0u);
  EXPECT_EQ(ads->config().memory_budget_bytes(), 0u);
  EXPECT_EQ(ads->rejected_gradients(), 0u);
  // A flag reaches every table that does not set its key.
  for (const auto* table : {&*users, &*ads, &*context}) {
    EXPECT_EQ(table->config().evict_after_seconds(), 86400u)
        << table->config().name();
  }
  EXPECT_EQ(users->config().dim(), 16u);  // --embedding_dim
  EXPECT_EQ(ads->config().dim(), 16u);
  EXPECT_EQ(context->config().dim(), 4u);
  EXPECT_GT(ads->num_rows(), 0u);
  EXPECT_GT(context->num_rows(), 0u);
  EXPECT_THAT(Table(kTable).status(),
              ::strata::testing::StatusIs(absl::StatusCode::kNotFound));

  // The same file again attaches to the three tables.
  ASSERT_EQ(RunWorker({model_config, "--evict_after_seconds=86400"}, &log), 0)
      << log;
  // A table whose config changed: an error naming the table and the field.
  std::string changed = kModelConfig;
  changed.replace(changed.find("evict_after_steps: 1000000"),
                  std::string("evict_after_steps: 1000000").size(),
                  "evict_after_steps: 5");
  EXPECT_EQ(RunWorker({ModelConfigFlag(changed), "--evict_after_seconds=86400"},
                      &log),
            1);
  EXPECT_THAT(log, HasSubstr("table 'ads' already exists with another"));
  EXPECT_THAT(log, HasSubstr("evict_after_steps"));
}

TEST_F(WorkerTablePolicyTest, ABadModelConfigIsAUsageErrorNamingTheField) {
  std::string log;
  std::string bad = kModelConfig;
  bad.replace(bad.find("C21-C26"), 7, "C21-C25");
  EXPECT_EQ(RunWorker({ModelConfigFlag(bad)}, &log), 2);
  EXPECT_THAT(log, HasSubstr("C26 is in no table"));
  EXPECT_THAT(log, HasSubstr(".yaml"));
  EXPECT_EQ(RunWorker({"--model_config=/nonexistent/model.yaml"}, &log), 2);
  EXPECT_THAT(log, HasSubstr("cannot read model config /nonexistent"));
  std::string too_wide = kModelConfig;
  too_wide.replace(too_wide.find("dim: 4"), 6, "dim: 17");
  EXPECT_EQ(RunWorker({ModelConfigFlag(too_wide)}, &log), 2);
  EXPECT_THAT(log, HasSubstr("tables[2].dim: 17 is not in [1, "
                             "--embedding_dim=16]"));
}

TEST_F(WorkerTablePolicyTest, ABadPolicyIsRefusedNamingTheField) {
  std::string log;
  EXPECT_EQ(RunWorker({"--admit_probability=1.5"}, &log), 1);
  EXPECT_THAT(log, HasSubstr("admit_probability"));
}

}  // namespace
}  // namespace strata
