// The training loop against real training shards (strata-server processes)
// with ranks in threads joined by Gloo over loopback.

#include "worker/training/trainer.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "common/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/training_data.h"
#include "worker/collective/collective.h"
#include "worker/collective/gloo_collective.h"
#include "worker/collective/rendezvous.h"
#include "worker/data/criteo_format.h"
#include "worker/data/datagen.h"

namespace strata {
namespace {

using ::strata::testing::GenerateLearnableData;
using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::StatusIs;
using ::strata::testing::TempDir;

uint64_t HashParameters(absl::Span<const float> parameters) {
  return HashString(
      absl::string_view(reinterpret_cast<const char*>(parameters.data()),
                        parameters.size() * sizeof(float)));
}

ModelConfig SmallModel() {
  ModelConfig model;
  model.embedding_dim = 8;
  model.bottom_hidden = {16};
  model.top_hidden = {32};
  return model;
}

// The three tables of a grouping of the 26 fields: C1, C2-C13, C14-C26.
std::vector<FeatureTable> ThreeFeatureTables(const std::string& prefix,
                                             const v1::TableConfig& config) {
  std::vector<FeatureTable> tables(3);
  for (int t = 0; t < 3; ++t) {
    tables[t].name = absl::StrCat(prefix, t);
    tables[t].config = config;
  }
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    tables[f == 0 ? 0 : (f < 13 ? 1 : 2)].fields.push_back(f);
  }
  return tables;
}

// Each table of the shards (ListTables: rows summed), by name.
std::map<std::string, v1::TableInfo> TablesOf(
    const std::vector<std::string>& shards) {
  PsClientOptions options;
  options.shard_addresses = shards;
  std::map<std::string, v1::TableInfo> by_name;
  auto client = PsClient::Create(options);
  EXPECT_THAT(client.status(), IsOk());
  if (!client.ok()) return by_name;
  auto tables = (*client)->ListTables();
  EXPECT_THAT(tables.status(), IsOk());
  if (!tables.ok()) return by_name;
  for (const v1::TableInfo& table : *tables) {
    by_name[table.config().name()] = table;
  }
  return by_name;
}

// Rows of each table, from the shards' ListTables.
std::map<std::string, uint64_t> RowsOfTables(
    const std::vector<std::string>& shards) {
  std::map<std::string, uint64_t> rows;
  for (const auto& [name, table] : TablesOf(shards)) {
    rows[name] = table.num_rows();
  }
  return rows;
}

// The dim of each table.
std::map<std::string, uint32_t> DimsOfTables(
    const std::vector<std::string>& shards) {
  std::map<std::string, uint32_t> dims;
  for (const auto& [name, table] : TablesOf(shards)) {
    dims[name] = table.config().dim();
  }
  return dims;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto& shard : shards_) {
      shard = std::make_unique<ServerProcess>();
      ASSERT_THAT(shard->Start(), IsOk());
    }
    auto generated = GenerateLearnableData(dir_.path(), 40000, 4000);
    ASSERT_THAT(generated.status(), IsOk());
    data_ = *generated;
  }

  std::vector<std::string> Addresses() const {
    return {shards_[0]->address(), shards_[1]->address()};
  }

  TrainerOptions Options(const std::string& table, int batch_size) const {
    TrainerOptions options;
    options.model = SmallModel();
    options.table = table;
    options.table_config.mutable_optimizer()->set_type(v1::ADAM);
    options.table_config.mutable_optimizer()->set_learning_rate(0.03f);
    options.table_config.mutable_initializer()->set_type(v1::TRUNCATED_NORMAL);
    options.table_config.mutable_initializer()->set_stddev(0.01f);
    options.train.files = data_.files;
    options.train.batch_size = batch_size;
    options.progress_interval = absl::Hours(1);
    options.on_progress = [](const ProgressReport&) {};
    return options;
  }

  // Runs `world_size` ranks in threads; returns each rank's result.
  std::vector<absl::StatusOr<TrainingResult>> RunRanks(
      int world_size, const std::string& job,
      const std::function<TrainerOptions(int rank)>& options_of) {
    std::vector<absl::StatusOr<TrainingResult>> results(
        world_size, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world_size; ++rank) {
      threads.emplace_back([&, rank] {
        results[rank] = RunRank(rank, world_size, job, options_of(rank));
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  absl::StatusOr<TrainingResult> RunRank(int rank, int world_size,
                                         const std::string& job,
                                         TrainerOptions options) {
    PsClientOptions ps_options;
    ps_options.shard_addresses = Addresses();
    ps_options.client_id = absl::StrCat(job, "-", rank);
    ps_options.retry_deadline = retry_deadline_;
    auto ps = PsClient::Create(ps_options);
    if (!ps.ok()) return ps.status();
    RendezvousClientOptions rendezvous_options;
    rendezvous_options.address = shards_[0]->address();
    auto rendezvous = CreateGrpcRendezvousClient(rendezvous_options);
    if (!rendezvous.ok()) return rendezvous.status();
    std::unique_ptr<Collective> collective;
    if (world_size == 1) {
      collective = CreateLocalCollective();
    } else {
      GlooCollectiveOptions gloo;
      gloo.rank = rank;
      gloo.world_size = world_size;
      gloo.rendezvous = rendezvous->get();
      gloo.job_id = job;
      gloo.timeout = absl::Seconds(60);
      auto created = CreateGlooCollective(gloo);
      if (!created.ok()) return created.status();
      collective = std::move(*created);
    }
    auto model = CreateCpuDenseModel(options.model);
    if (!model.ok()) return model.status();
    auto trainer = Trainer::Create(std::move(options), ps->get(),
                                   collective.get(), std::move(*model));
    if (!trainer.ok()) return trainer.status();
    return (*trainer)->Run();
  }

  absl::Duration retry_deadline_ = absl::Seconds(30);
  TempDir dir_{"trainer_test"};
  std::unique_ptr<ServerProcess> shards_[2];
  DatagenResult data_;
};

TEST(AutoEpochsTest, SmallDataGetsSeveralPassesLargeDataOne) {
  EXPECT_EQ(AutoEpochsForRows(0), 1);
  EXPECT_EQ(AutoEpochsForRows(10'000), kMaxAutoEpochs);
  EXPECT_EQ(AutoEpochsForRows(kAutoEpochExamples / 2), 2);
  EXPECT_EQ(AutoEpochsForRows(kAutoEpochExamples / 2 - 1), 3);
  EXPECT_EQ(AutoEpochsForRows(kAutoEpochExamples), 1);
  EXPECT_EQ(AutoEpochsForRows(100'000'000), 1);
}

TEST_F(TrainerTest, TwoRanksHoldIdenticalDenseParametersAfterEveryStep) {
  absl::Mutex mu;
  std::vector<uint64_t> hashes[2];
  auto results = RunRanks(2, "identical", [&](int rank) {
    TrainerOptions options = Options("identical", 256);
    options.max_steps = 30;
    options.on_step = [&, rank](int64_t, absl::Span<const float> p) {
      absl::MutexLock lock(&mu);
      hashes[rank].push_back(HashParameters(p));
    };
    return options;
  });
  ASSERT_THAT(results[0].status(), IsOk());
  ASSERT_THAT(results[1].status(), IsOk());
  EXPECT_EQ(results[0]->steps, 30);
  ASSERT_EQ(hashes[0].size(), 30u);
  EXPECT_EQ(hashes[0], hashes[1]);
  // The parameters did change from step to step.
  EXPECT_NE(hashes[0].front(), hashes[0].back());
}

TEST_F(TrainerTest, HalfBatchesOnTwoRanksMatchTheWholeBatchOnOne) {
  std::vector<float> whole, halves[2];
  auto capture = [](std::vector<float>* out) {
    return [out](int64_t, absl::Span<const float> p) {
      out->assign(p.begin(), p.end());
    };
  };
  auto one = RunRanks(1, "whole", [&](int) {
    TrainerOptions options = Options("whole", 512);
    options.max_steps = 1;
    options.staleness = 0;
    options.on_step = capture(&whole);
    return options;
  });
  ASSERT_THAT(one[0].status(), IsOk());
  auto two = RunRanks(2, "halves", [&](int rank) {
    TrainerOptions options = Options("halves", 256);
    options.max_steps = 1;
    options.staleness = 0;
    options.on_step = capture(&halves[rank]);
    return options;
  });
  ASSERT_THAT(two[0].status(), IsOk());
  ASSERT_THAT(two[1].status(), IsOk());
  ASSERT_EQ(whole.size(), halves[0].size());
  ASSERT_EQ(halves[0], halves[1]);
  const std::vector<float> initial = InitialDenseParameters(SmallModel());
  size_t moved = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_NEAR(halves[0][i], whole[i], 1e-6 + 1e-5 * std::abs(whole[i]))
        << "parameter " << i;
    if (whole[i] != initial[i]) ++moved;
  }
  EXPECT_GT(moved, whole.size() / 2);  // a real step, not a no-op
}

TEST_F(TrainerTest, TwoRanksLearnTheHoldout) {
  auto results = RunRanks(2, "learn", [&](int) {
    TrainerOptions options = Options("learn", 256);
    options.epochs = 3;
    options.dense_optimizer.learning_rate = 3e-3f;
    options.eval_files = {data_.holdout_file};
    return options;
  });
  ASSERT_THAT(results[0].status(), IsOk());
  ASSERT_THAT(results[1].status(), IsOk());
  EXPECT_EQ(results[0]->eval.examples, 4000);
  EXPECT_EQ(results[0]->eval.auc, results[1]->eval.auc);
  // Learning, far above chance (how near the ceiling training gets is
  // distributed_training_test's business, with more rows).
  EXPECT_GT(results[0]->eval.auc, 0.70) << "planted " << data_.holdout.auc;
  EXPECT_LE(results[0]->eval.auc, data_.holdout.auc + 0.01);
  EXPECT_EQ(results[0]->examples, 3 * 40000);
}

TEST_F(TrainerTest, CheckpointThenRestoreResumesAtTheSavedStep) {
  const std::string checkpoints = absl::StrCat(dir_.path(), "/ckpt");
  std::vector<float> saved;
  auto first = RunRanks(1, "ckpt", [&](int) {
    TrainerOptions options = Options("ckpt", 1000);
    options.max_steps = 5;
    options.checkpoint_dir = checkpoints;
    options.on_step = [&](int64_t, absl::Span<const float> p) {
      saved.assign(p.begin(), p.end());
    };
    return options;
  });
  ASSERT_THAT(first[0].status(), IsOk());
  int64_t first_step = -1;
  auto second = RunRanks(1, "ckpt2", [&](int) {
    TrainerOptions options = Options("ckpt", 1000);
    options.max_steps = 8;
    options.checkpoint_dir = checkpoints;
    options.restore = true;
    options.on_step = [&](int64_t step, absl::Span<const float>) {
      if (first_step < 0) first_step = step;
    };
    return options;
  });
  ASSERT_THAT(second[0].status(), IsOk());
  EXPECT_EQ(first_step, 6);  // resumed after step 5
  EXPECT_EQ(second[0]->steps, 8);
  EXPECT_EQ(second[0]->examples, 3 * 1000);
}

TEST_F(TrainerTest, ACheckpointOfAnotherTableGroupingIsRefused) {
  const std::string checkpoints = absl::StrCat(dir_.path(), "/grouped_ckpt");
  auto first = RunRanks(1, "grouped_ckpt", [&](int) {
    TrainerOptions options = Options("unused", 500);
    options.feature_tables =
        ThreeFeatureTables("ckpt_group_", options.table_config);
    options.max_steps = 2;
    options.checkpoint_dir = checkpoints;
    return options;
  });
  ASSERT_THAT(first[0].status(), IsOk());
  // Its rows are in three tables; one table of every field would resume
  // against rows it does not have.
  auto one_table = RunRanks(1, "grouped_ckpt2", [&](int) {
    TrainerOptions options = Options("ckpt_group_all", 500);
    options.max_steps = 4;
    options.checkpoint_dir = checkpoints;
    options.restore = true;
    return options;
  });
  EXPECT_THAT(one_table[0].status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("checkpoint is of another model")));
  // The same grouping resumes.
  auto same = RunRanks(1, "grouped_ckpt3", [&](int) {
    TrainerOptions options = Options("unused", 500);
    options.feature_tables =
        ThreeFeatureTables("ckpt_group_", options.table_config);
    options.max_steps = 4;
    options.checkpoint_dir = checkpoints;
    options.restore = true;
    return options;
  });
  ASSERT_THAT(same[0].status(), IsOk());
  EXPECT_EQ(same[0]->steps, 4);
}

// Checkpoints after every step, every third one full: the shards hold
// deltas, and a restore from the latest (a delta) resumes where it was.
TEST_F(TrainerTest, IncrementalCheckpointsRestoreThroughTheirChain) {
  const std::string checkpoints = absl::StrCat(dir_.path(), "/delta-ckpt");
  auto first = RunRanks(1, "delta", [&](int) {
    TrainerOptions options = Options("delta", 1000);
    options.max_steps = 5;
    options.checkpoint_dir = checkpoints;
    options.checkpoint_every_steps = 1;
    options.full_checkpoint_every = 3;
    return options;
  });
  ASSERT_THAT(first[0].status(), IsOk());
  // Steps 1 (full), 2, 3 (deltas), 4 (full), 5 (delta), and the end (delta).
  for (const auto& shard : shards_) {
    int full = 0, deltas = 0;
    for (const auto& entry : std::filesystem::directory_iterator(
             absl::StrCat(shard->data_dir(), "/checkpoints"))) {
      std::ifstream manifest(entry.path() / "STRATA_CHECKPOINT");
      const std::string text((std::istreambuf_iterator<char>(manifest)),
                             std::istreambuf_iterator<char>());
      ++(absl::StrContains(text, "parent=") ? deltas : full);
    }
    EXPECT_EQ(full, 2) << shard->data_dir();
    EXPECT_EQ(deltas, 4) << shard->data_dir();
  }
  int64_t first_step = -1;
  auto second = RunRanks(1, "delta2", [&](int) {
    TrainerOptions options = Options("delta", 1000);
    options.max_steps = 8;
    options.checkpoint_dir = checkpoints;
    options.restore = true;
    options.on_step = [&](int64_t step, absl::Span<const float>) {
      if (first_step < 0) first_step = step;
    };
    return options;
  });
  ASSERT_THAT(second[0].status(), IsOk());
  EXPECT_EQ(first_step, 6);
  EXPECT_EQ(second[0]->steps, 8);
}

TEST_F(TrainerTest, RestoreWithoutACheckpointFailsNamingTheDirectory) {
  auto results = RunRanks(1, "none", [&](int) {
    TrainerOptions options = Options("none", 100);
    options.checkpoint_dir = absl::StrCat(dir_.path(), "/empty");
    options.restore = true;
    return options;
  });
  EXPECT_THAT(results[0].status(),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::HasSubstr("no checkpoint in")));
}

// Rows of `keys`, `dim` floats each, from the test's shards.
std::vector<float> PullRows(const std::vector<std::string>& shards,
                            const std::string& table,
                            const std::vector<uint64_t>& keys, int dim = 8) {
  PsClientOptions options;
  options.shard_addresses = shards;
  auto client = PsClient::Create(options);
  EXPECT_THAT(client.status(), IsOk());
  std::vector<float> rows(keys.size() * dim);
  if (client.ok()) {
    EXPECT_THAT((*client)->Pull(table, keys, absl::MakeSpan(rows)), IsOk());
  }
  return rows;
}

// Writes two examples to `file`: example 0 (a click) holds a and b in C1,
// example 1 (none) c twice and d once in C2. Returns the keys of a, b, c, d.
std::vector<uint64_t> WriteTwoMultiHotExamples(const std::string& file) {
  std::ofstream(file) << "1\t3" << std::string(13, '\t')
                      << "0000000a,0000000b\n"
                      << "0\t5" << std::string(13, '\t')
                      << "\t0000000c,0000000c,0000000d\n";
  return {CriteoFeatureKey(0, 0xa), CriteoFeatureKey(0, 0xb),
          CriteoFeatureKey(1, 0xc), CriteoFeatureKey(1, 0xd)};
}

TEST_F(TrainerTest, MultiHotFieldsPoolTheirKeysAndPushEachKeysGradient) {
  // One step over two examples (sum pooling).
  const std::string file = absl::StrCat(dir_.path(), "/multi_hot");
  const std::vector<uint64_t> keys = WriteTwoMultiHotExamples(file);
  TrainerOptions options = Options("multi_hot", 2);
  options.table_config.mutable_optimizer()->set_type(v1::SGD);
  options.table_config.mutable_optimizer()->set_learning_rate(1.0f);
  options.train.files = {file};
  options.eval_files = {file};
  options.staleness = 0;
  // The trainer's own CreateTable is then a no-op; the rows before it runs
  // are the initial ones.
  {
    PsClientOptions ps_options;
    ps_options.shard_addresses = Addresses();
    auto client = PsClient::Create(ps_options);
    ASSERT_THAT(client.status(), IsOk());
    v1::TableConfig config = options.table_config;
    config.set_name("multi_hot");
    config.set_dim(8);
    ASSERT_THAT((*client)->CreateTable(config), IsOk());
  }
  const std::vector<float> before = PullRows(Addresses(), "multi_hot", keys);
  auto results = RunRanks(1, "multi_hot", [&](int) { return options; });
  ASSERT_THAT(results[0].status(), IsOk());
  EXPECT_EQ(results[0]->steps, 1);
  EXPECT_EQ(results[0]->eval.examples, 2);  // eval reads multi-hot too
  const std::vector<float> after = PullRows(Addresses(), "multi_hot", keys);
  auto delta = [&](int k, int d) {
    return after[k * 8 + d] - before[k * 8 + d];
  };
  double moved = 0;
  for (int d = 0; d < 8; ++d) {
    // a and b share example 0's pooled gradient; c counts twice, d once.
    EXPECT_NEAR(delta(0, d), delta(1, d), 1e-6) << d;
    EXPECT_NEAR(delta(2, d), 2 * delta(3, d), 1e-6) << d;
    moved += std::abs(delta(0, d)) + std::abs(delta(3, d));
  }
  EXPECT_GT(moved, 1e-4);
}

TEST_F(TrainerTest, TheWideTermGivesEachKeyTheGradientOfItsExamplesLogits) {
  // One step over two examples. The wide weights start at zero and move by
  // SGD at rate 1 by -(p - y) / 2 per occurrence.
  const std::string file = absl::StrCat(dir_.path(), "/wide");
  std::vector<uint64_t> keys = WriteTwoMultiHotExamples(file);
  keys.push_back(CriteoFeatureKey(2, 0xe));  // in neither example
  TrainerOptions options = Options("deep", 2);
  options.train.files = {file};
  options.eval_files = {file};
  options.staleness = 0;
  options.wide_table = "deep_wide";
  options.wide_table_config.mutable_optimizer()->set_type(v1::SGD);
  options.wide_table_config.mutable_optimizer()->set_learning_rate(1.0f);
  options.wide_table_config.mutable_initializer()->set_type(v1::ZEROS);
  auto results = RunRanks(1, "wide", [&](int) { return options; });
  ASSERT_THAT(results[0].status(), IsOk());
  EXPECT_EQ(results[0]->steps, 1);
  EXPECT_EQ(results[0]->eval.examples, 2);
  // PullRows reads dim 8; the wide table has dim 1.
  PsClientOptions ps_options;
  ps_options.shard_addresses = Addresses();
  auto client = PsClient::Create(ps_options);
  ASSERT_THAT(client.status(), IsOk());
  std::vector<float> wide(keys.size());
  ASSERT_THAT((*client)->Pull("deep_wide", keys, absl::MakeSpan(wide)), IsOk());
  // a and b: -(p0 - 1) / 2, in (0, 0.5); d: -p1 / 2, in (-0.5, 0); c twice
  // that; e untouched.
  EXPECT_GT(wide[0], 0.0f);
  EXPECT_LT(wide[0], 0.5f);
  EXPECT_FLOAT_EQ(wide[0], wide[1]);
  EXPECT_LT(wide[3], 0.0f);
  EXPECT_GT(wide[3], -0.5f);
  EXPECT_NEAR(wide[2], 2 * wide[3], 1e-7);
  EXPECT_EQ(wide[4], 0.0f);
  // The table the trainer made: dimension 1.
  auto tables = (*client)->ListTables();
  ASSERT_THAT(tables.status(), IsOk());
  bool found = false;
  for (const auto& table : *tables) {
    if (table.config().name() != "deep_wide") continue;
    found = true;
    EXPECT_EQ(table.config().dim(), 1u);
  }
  EXPECT_TRUE(found);
}

TEST_F(TrainerTest, FieldsInTablesOfTheirOwnTrainExactlyAsOneTable) {
  // Rows start from (seed, key) alone, so the same optimizer in three
  // tables gives the same steps as in one, bit for bit.
  std::vector<uint64_t> one_table, three_tables;
  auto record = [](std::vector<uint64_t>* hashes) {
    return [hashes](int64_t, absl::Span<const float> p) {
      hashes->push_back(HashParameters(p));
    };
  };
  auto one = RunRanks(1, "one_table", [&](int) {
    TrainerOptions options = Options("one_table", 256);
    options.max_steps = 12;
    options.staleness = 0;
    options.on_step = record(&one_table);
    return options;
  });
  ASSERT_THAT(one[0].status(), IsOk());
  auto three = RunRanks(1, "three_tables", [&](int) {
    TrainerOptions options = Options("unused", 256);
    options.feature_tables =
        ThreeFeatureTables("grouped_", options.table_config);
    options.max_steps = 12;
    options.staleness = 0;
    options.on_step = record(&three_tables);
    return options;
  });
  ASSERT_THAT(three[0].status(), IsOk());
  ASSERT_EQ(one_table.size(), 12u);
  EXPECT_EQ(one_table, three_tables);
  EXPECT_NE(one_table.front(), one_table.back());
  // Every key went to its field's table and nowhere else.
  std::map<std::string, uint64_t> rows = RowsOfTables(Addresses());
  EXPECT_EQ(rows.count("unused"), 0u);
  EXPECT_GT(rows["grouped_0"], 0u);
  EXPECT_GT(rows["grouped_1"], rows["grouped_0"]);
  EXPECT_GT(rows["grouped_2"], 0u);
  EXPECT_EQ(rows["grouped_0"] + rows["grouped_1"] + rows["grouped_2"],
            rows["one_table"]);
}

TEST_F(TrainerTest, EachKeyIsPulledAndPushedInItsFieldsTable) {
  // Example 0 holds a and b in C1, example 1 holds c and d in C2; every
  // other field is empty (one missing-value key per field).
  const std::string file = absl::StrCat(dir_.path(), "/two_tables");
  const std::vector<uint64_t> keys = WriteTwoMultiHotExamples(file);
  TrainerOptions options = Options("unused", 2);
  options.table_config.mutable_optimizer()->set_type(v1::SGD);
  options.table_config.mutable_optimizer()->set_learning_rate(1.0f);
  options.feature_tables = ThreeFeatureTables("split_", options.table_config);
  options.train.files = {file};
  options.eval_files = {file};
  options.staleness = 0;
  auto results = RunRanks(1, "split", [&](int) { return options; });
  ASSERT_THAT(results[0].status(), IsOk());
  EXPECT_EQ(results[0]->eval.examples, 2);
  std::map<std::string, uint64_t> rows = RowsOfTables(Addresses());
  // C1: a, b and its missing key (example 1); C2-C13: c, d, C2's missing
  // key (example 0) and those of C3-C13; C14-C26: their missing keys.
  EXPECT_EQ(rows["split_0"], 3u);
  EXPECT_EQ(rows["split_1"], 2u + 1u + 11u);
  EXPECT_EQ(rows["split_2"], 13u);
  // a and c were trained where they live: their rows differ from a fresh
  // row of the same key in a table nothing pushed to.
  v1::TableConfig fresh = options.table_config;
  fresh.set_name("fresh");
  fresh.set_dim(8);
  {
    PsClientOptions ps_options;
    ps_options.shard_addresses = Addresses();
    auto client = PsClient::Create(ps_options);
    ASSERT_THAT(client.status(), IsOk());
    ASSERT_THAT((*client)->CreateTable(fresh), IsOk());
  }
  const std::vector<uint64_t> a = {keys[0]}, c = {keys[2]};
  EXPECT_NE(PullRows(Addresses(), "split_0", a),
            PullRows(Addresses(), "fresh", a));
  EXPECT_NE(PullRows(Addresses(), "split_1", c),
            PullRows(Addresses(), "fresh", c));
}

TEST_F(TrainerTest, ANarrowTableStepsAsTheFirstComponentsOfAFullWidthOne) {
  // Rows start at zero, so a dim-4 row padded to the model's 8 is the
  // full-width row: one SGD step moves the narrow row exactly as the first
  // four components of the wide one, and pushes nothing else.
  const std::string file = absl::StrCat(dir_.path(), "/narrow_step");
  const std::vector<uint64_t> keys = WriteTwoMultiHotExamples(file);
  auto step_with_dim = [&](const std::string& prefix, uint32_t dim) {
    TrainerOptions options = Options("unused", 2);
    options.model.interaction = Interaction::kConcat;
    options.table_config.mutable_optimizer()->set_type(v1::SGD);
    options.table_config.mutable_optimizer()->set_learning_rate(1.0f);
    options.table_config.mutable_initializer()->set_type(v1::ZEROS);
    options.feature_tables = ThreeFeatureTables(prefix, options.table_config);
    options.feature_tables[1].config.set_dim(dim);
    options.train.files = {file};
    options.staleness = 0;
    auto results = RunRanks(1, prefix, [&](int) { return options; });
    EXPECT_THAT(results[0].status(), IsOk());
    // c and d, in C2: table 1.
    return PullRows(Addresses(), prefix + "1", {keys[2], keys[3]}, dim);
  };
  const std::vector<float> full = step_with_dim("full_", 8);
  const std::vector<float> narrow = step_with_dim("narrow_", 4);
  ASSERT_EQ(full.size(), 16u);
  ASSERT_EQ(narrow.size(), 8u);
  double full_tail = 0;
  for (int k = 0; k < 2; ++k) {
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(narrow[k * 4 + d], full[k * 8 + d]) << k << "," << d;
    }
    for (int d = 4; d < 8; ++d) full_tail += std::abs(full[k * 8 + d]);
  }
  EXPECT_GT(full_tail, 0);  // the full-width row moved there; the narrow
                            // one has nowhere to
  EXPECT_NE(narrow, std::vector<float>(8, 0.0f));
  std::map<std::string, uint32_t> dims = DimsOfTables(Addresses());
  EXPECT_EQ(dims["narrow_0"], 8u);
  EXPECT_EQ(dims["narrow_1"], 4u);
  EXPECT_EQ(dims["full_1"], 8u);
}

TEST_F(TrainerTest, ANarrowTablesPaddingNeverReachesTheModel) {
  // Under concat, the top layer's weights of a narrow table's padded
  // inputs see only zeros, so their gradient is zero at every step and
  // Adam leaves them where they started; those of its own components move.
  TrainerOptions options = Options("unused", 256);
  options.model.interaction = Interaction::kConcat;
  options.feature_tables = ThreeFeatureTables("pad_", options.table_config);
  options.feature_tables[1].config.set_dim(4);  // C2-C13
  options.max_steps = 20;
  options.staleness = 1;
  std::vector<float> last;
  options.on_step = [&](int64_t, absl::Span<const float> p) {
    last.assign(p.begin(), p.end());
  };
  auto results = RunRanks(1, "pad", [&](int) { return options; });
  ASSERT_THAT(results[0].status(), IsOk());
  const std::vector<float> initial = InitialDenseParameters(options.model);
  const DenseLayout layout = MakeDenseLayout(options.model);
  ASSERT_EQ(last.size(), initial.size());
  const DenseLayer& first_top = layout.top[0];
  const int dim = options.model.embedding_dim;
  // z = [bottom, e_1 .. e_26]: input dim + f * dim + c.
  auto moved = [&](int field, int component) {
    const size_t input = dim + field * dim + component;
    double change = 0;
    for (int o = 0; o < first_top.outputs; ++o) {
      const size_t i = first_top.weight_offset + input * first_top.outputs + o;
      change += std::abs(last[i] - initial[i]);
    }
    return change;
  };
  for (int field = 1; field < 13; ++field) {
    for (int c = 4; c < dim; ++c) {
      EXPECT_EQ(moved(field, c), 0.0) << "C" << field + 1 << "[" << c << "]";
    }
    EXPECT_GT(moved(field, 0), 0.0) << "C" << field + 1;
  }
  EXPECT_GT(moved(0, dim - 1), 0.0);   // C1: full width
  EXPECT_GT(moved(13, dim - 1), 0.0);  // C14: full width
}

TEST_F(TrainerTest, MixedWidthTablesLearnTheHoldout) {
  auto results = RunRanks(2, "mixed", [&](int) {
    TrainerOptions options = Options("unused", 256);
    options.feature_tables = ThreeFeatureTables("mixed_", options.table_config);
    options.feature_tables[0].config.set_dim(2);
    options.feature_tables[1].config.set_dim(4);
    options.epochs = 3;
    options.dense_optimizer.learning_rate = 3e-3f;
    options.eval_files = {data_.holdout_file};
    return options;
  });
  ASSERT_THAT(results[0].status(), IsOk());
  ASSERT_THAT(results[1].status(), IsOk());
  EXPECT_EQ(results[0]->eval.auc, results[1]->eval.auc);
  EXPECT_GT(results[0]->eval.auc, 0.70) << "planted " << data_.holdout.auc;
  std::map<std::string, uint32_t> dims = DimsOfTables(Addresses());
  EXPECT_EQ(dims["mixed_0"], 2u);
  EXPECT_EQ(dims["mixed_1"], 4u);
  EXPECT_EQ(dims["mixed_2"], 8u);
}

TEST_F(TrainerTest, Fp16PullsLearnAsFloat32PullsDo) {
  // strata-worker --pull_fp16: the pulls of training and evaluation go
  // through a client of fp16 rows, the pushes through the float32 one.
  PsClientOptions fp16_options;
  fp16_options.shard_addresses = Addresses();
  fp16_options.encoding = WireEncoding::kFloat16;
  auto fp16 = PsClient::Create(fp16_options);
  ASSERT_THAT(fp16.status(), IsOk());
  std::map<std::string, uint64_t> final_parameters;
  std::map<std::string, double> auc;
  for (const std::string table : {"f32_rows", "f16_rows"}) {
    auto results = RunRanks(1, table, [&](int) {
      TrainerOptions options = Options(table, 256);
      options.epochs = 2;
      options.dense_optimizer.learning_rate = 3e-3f;
      // Synchronous, so that the two runs differ by the rounding alone: with
      // a pull overlapping the previous push, whether it saw the push was
      // timing, and one configuration's AUC ranged over 0.748-0.760 between
      // runs. Synchronous runs repeat their AUCs exactly.
      options.staleness = 0;
      options.eval_files = {data_.holdout_file};
      if (table == "f16_rows") options.pull_ps = fp16->get();
      options.on_step = [&](int64_t, absl::Span<const float> p) {
        final_parameters[table] = HashParameters(p);
      };
      return options;
    });
    ASSERT_THAT(results[0].status(), IsOk());
    auc[table] = results[0]->eval.auc;
  }
  // The rounded rows reached the model (its steps differ), and it learns
  // as well.
  EXPECT_NE(final_parameters["f16_rows"], final_parameters["f32_rows"]);
  EXPECT_GT(auc["f16_rows"], 0.70);
  EXPECT_NEAR(auc["f16_rows"], auc["f32_rows"], 0.01);
  // Rows on the shards stay float32: a float32 pull of the fp16 run's
  // table is not all fp16-representable.
  PsClientOptions f32_options;
  f32_options.shard_addresses = Addresses();
  auto f32 = PsClient::Create(f32_options);
  ASSERT_THAT(f32.status(), IsOk());
  std::vector<uint64_t> keys;
  for (int value = 0; value < 50; ++value) {
    keys.push_back(CriteoFeatureKey(0, static_cast<uint32_t>(value)));
  }
  std::vector<float> exact(keys.size() * 8), halves(keys.size() * 8);
  ASSERT_THAT((*f32)->Pull("f16_rows", keys, absl::MakeSpan(exact)), IsOk());
  ASSERT_THAT((*fp16)->Pull("f16_rows", keys, absl::MakeSpan(halves)), IsOk());
  size_t rounded = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_NEAR(halves[i], exact[i], std::abs(exact[i]) * 1e-3 + 1e-7);
    rounded += halves[i] != exact[i];
  }
  EXPECT_GT(rounded, exact.size() / 2);
}

TEST_F(TrainerTest, ATableWiderThanTheModelIsRefused) {
  TrainerOptions options = Options("unused", 256);
  options.feature_tables = ThreeFeatureTables("toowide_", options.table_config);
  options.feature_tables[2].config.set_dim(9);
  auto results = RunRanks(1, "too_wide", [&](int) { return options; });
  EXPECT_THAT(results[0].status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("feature table \"toowide_2\" has "
                                            "dim 9, above the model's "
                                            "embedding_dim 8")));
}

TEST_F(TrainerTest, ShardDownPastTheRetryDeadlineStopsWithAnError) {
  ASSERT_THAT(shards_[1]->Kill9(), IsOk());
  retry_deadline_ = absl::Seconds(2);
  auto results = RunRanks(1, "down", [&](int) {
    TrainerOptions options = Options("down", 100);
    return options;
  });
  // CreateTable reaches every shard; PsClient names the dead one.
  EXPECT_FALSE(results[0].ok());
  EXPECT_THAT(std::string(results[0].status().message()),
              ::testing::HasSubstr(shards_[1]->address()));
}

}  // namespace
}  // namespace strata
