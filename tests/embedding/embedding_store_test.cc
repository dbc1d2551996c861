#include "embedding/embedding_store.h"

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "embedding/embedding_table.h"
#include "embedding/table_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {

// Names the test parameter in failure messages (found by ADL, so it lives in
// the namespace of Durability).
void PrintTo(Durability durability, std::ostream* os) {
  *os << DurabilityName(durability);
}

namespace {

using ::strata::testing::IsOk;
using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr FeatureId kKeyRange = 200;

// Three tables covering the state layouts: Adam (m, v, step), FTRL with L1
// and L2 (z, n) and SGD (no state).
std::vector<EmbeddingTableConfig> TableConfigs() {
  EmbeddingTableConfig user;
  user.name = "user";
  user.dim = 8;
  user.seed = 17;
  user.initializer.type = InitializerType::kUniform;
  user.optimizer.type = OptimizerType::kAdam;
  user.optimizer.learning_rate = 0.05f;

  EmbeddingTableConfig item;
  item.name = "item";
  item.dim = 4;
  item.seed = 18;
  item.initializer.type = InitializerType::kTruncatedNormal;
  item.optimizer.type = OptimizerType::kFtrl;
  item.optimizer.learning_rate = 0.1f;
  item.optimizer.l1 = 0.01f;
  item.optimizer.l2 = 0.1f;

  EmbeddingTableConfig bias;
  bias.name = "bias";
  bias.dim = 1;
  bias.initializer.type = InitializerType::kConstant;
  bias.initializer.value = 0.5f;
  bias.optimizer.type = OptimizerType::kSgd;
  return {user, item, bias};
}

// One table's part of a push, owning its keys and gradients.
struct Batch {
  std::string table;
  std::vector<FeatureId> keys;
  std::vector<float> gradients;
};

// The same rows in memory, for comparison.
class ReferenceTables {
 public:
  explicit ReferenceTables(const std::vector<EmbeddingTableConfig>& configs) {
    for (const EmbeddingTableConfig& config : configs) {
      tables_[config.name] = std::make_unique<EmbeddingTable>(config, 1);
    }
  }
  void Apply(const std::vector<Batch>& push) {
    for (const Batch& batch : push) {
      tables_.at(batch.table)
          ->ApplyGradients(batch.keys, batch.gradients.data(), false, nullptr);
    }
  }
  std::vector<float> Lookup(const std::string& table,
                            const std::vector<FeatureId>& keys) const {
    const EmbeddingTable& t = *tables_.at(table);
    std::vector<float> out(keys.size() * t.dim());
    t.Lookup(keys, out.data());
    return out;
  }
  uint64_t num_rows(const std::string& table) const {
    return tables_.at(table)->num_rows();
  }

 private:
  std::map<std::string, std::unique_ptr<EmbeddingTable>> tables_;
};

std::vector<FeatureId> AllKeys() {
  std::vector<FeatureId> keys;
  for (FeatureId key = 0; key < kKeyRange; ++key) keys.push_back(key);
  return keys;
}

// A deterministic push touching every table, with repeated keys.
std::vector<Batch> MakePush(std::mt19937& rng) {
  std::vector<Batch> push;
  for (const EmbeddingTableConfig& config : TableConfigs()) {
    Batch batch{config.name, {}, {}};
    for (int i = 0; i < 40; ++i) batch.keys.push_back(rng() % kKeyRange);
    for (size_t i = 0; i < batch.keys.size() * config.dim; ++i) {
      batch.gradients.push_back(static_cast<float>(int(rng() % 2001) - 1000) /
                                500.0f);
    }
    push.push_back(std::move(batch));
  }
  return push;
}

std::vector<GradientBatch> View(const std::vector<Batch>& push) {
  std::vector<GradientBatch> out;
  for (const Batch& batch : push) {
    out.push_back({batch.table, batch.keys, batch.gradients});
  }
  return out;
}

std::string Name(Durability durability) {
  switch (durability) {
    case Durability::kSync:
      return "Sync";
    case Durability::kGroup:
      return "Group";
    case Durability::kPeriodic:
      return "Periodic";
  }
  return "Unknown";
}

// A store in a fresh temporary directory, removed at the end.
class EmbeddingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    std::string pattern = ::testing::TempDir() + "strata_store_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    temp_dir_ = pattern;
    data_dir_ = temp_dir_ + "/data";
  }

  void TearDown() override {
    store_.reset();
    std::error_code error;
    std::filesystem::remove_all(temp_dir_, error);
    EXPECT_FALSE(error) << error.message();
  }

  EmbeddingStoreOptions Options() const {
    EmbeddingStoreOptions options;
    options.data_dir = data_dir_;
    options.durability = durability_;
    // No background flush during a test: the destructor and Flush() write.
    options.flush_interval = absl::Hours(1);
    return options;
  }

  absl::Status Open() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(Options());
    if (!store.ok()) return store.status();
    store_ = std::move(store).value();
    return absl::OkStatus();
  }

  void Close() { store_.reset(); }

  // Overwrites the CURRENT file of RocksDB in checkpoint `id`.
  void CorruptCheckpointCurrent(const std::string& id) {
    std::ofstream current(data_dir_ + "/checkpoints/" + id + "/CURRENT",
                          std::ios::binary | std::ios::trunc);
    current << "garbage";
  }

  void OpenWithTables() {
    ASSERT_THAT(Open(), IsOk());
    for (const EmbeddingTableConfig& config : TableConfigs()) {
      ASSERT_THAT(store_->CreateTable(config), IsOk()) << config.name;
    }
  }

  absl::StatusOr<bool> Push(const std::vector<Batch>& push,
                            const PushId& id = PushId()) {
    const std::vector<GradientBatch> batches = View(push);
    return store_->ApplyGradients(batches, id);
  }

  std::vector<float> Pull(const std::string& table,
                          const std::vector<FeatureId>& keys) {
    const absl::StatusOr<EmbeddingTableConfig> config =
        store_->GetTableConfig(table);
    EXPECT_THAT(config, IsOk()) << table;
    if (!config.ok()) return {};
    std::vector<float> out(keys.size() * config->dim);
    EXPECT_THAT(store_->Lookup(table, keys, absl::MakeSpan(out)), IsOk());
    return out;
  }

  // Every row of every table, by table name.
  std::map<std::string, std::vector<float>> PullAll() {
    std::map<std::string, std::vector<float>> rows;
    for (const EmbeddingTableConfig& config : TableConfigs()) {
      rows[config.name] = Pull(config.name, AllKeys());
    }
    return rows;
  }

  void ExpectMatchesReference(const ReferenceTables& reference) {
    for (const EmbeddingTableConfig& config : TableConfigs()) {
      EXPECT_EQ(Pull(config.name, AllKeys()),
                reference.Lookup(config.name, AllKeys()))
          << config.name;
    }
    for (const TableStats& stats : store_->ListTables()) {
      EXPECT_EQ(stats.num_rows, reference.num_rows(stats.config.name))
          << stats.config.name;
    }
  }

  Durability durability_ = Durability::kGroup;
  std::string temp_dir_;
  std::string data_dir_;
  std::unique_ptr<EmbeddingStore> store_;
};

// The same, once per durability mode.
class EmbeddingStoreDurabilityTest
    : public EmbeddingStoreTest,
      public ::testing::WithParamInterface<Durability> {
 protected:
  void SetUp() override {
    durability_ = GetParam();
    EmbeddingStoreTest::SetUp();
  }
};

TEST_P(EmbeddingStoreDurabilityTest, ReopenKeepsRowsAndOptimizerState) {
  OpenWithTables();
  EXPECT_EQ(store_->durability(), GetParam());
  ReferenceTables reference(TableConfigs());
  std::mt19937 rng(1);
  for (int i = 0; i < 6; ++i) {
    const std::vector<Batch> push = MakePush(rng);
    ASSERT_THAT(Push(push), IsOk());
    reference.Apply(push);
  }
  ExpectMatchesReference(reference);

  Close();
  ASSERT_THAT(Open(), IsOk());
  const std::vector<TableStats> tables = store_->ListTables();
  ASSERT_EQ(tables.size(), 3u);
  for (const TableStats& stats : tables) {
    auto config = store_->GetTableConfig(stats.config.name);
    ASSERT_THAT(config, IsOk());
    EXPECT_EQ(SerializeTableConfig(*config),
              SerializeTableConfig(stats.config));
  }
  ExpectMatchesReference(reference);

  // The same push on both: equal only if the optimizer state came back too.
  const std::vector<Batch> push = MakePush(rng);
  ASSERT_THAT(Push(push), IsOk());
  reference.Apply(push);
  ExpectMatchesReference(reference);

  // And once more across a second reopen.
  Close();
  ASSERT_THAT(Open(), IsOk());
  ExpectMatchesReference(reference);
}

TEST_P(EmbeddingStoreDurabilityTest,
       CreateTableIsIdempotentForIdenticalConfig) {
  ASSERT_THAT(Open(), IsOk());
  const EmbeddingTableConfig config = TableConfigs()[0];
  EXPECT_THAT(store_->CreateTable(config), IsOkAndHolds(true));
  EXPECT_THAT(store_->CreateTable(config), IsOkAndHolds(false));
  EmbeddingTableConfig other = config;
  other.dim = 9;
  // The error names what differs, and only that.
  EXPECT_THAT(store_->CreateTable(other),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       EndsWith("table 'user' already exists with another "
                                "config: dim=8 (asked 9)")));
  other = config;
  other.optimizer.learning_rate = 0.06f;
  EXPECT_THAT(store_->CreateTable(other),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       EndsWith(": lr=0.05 (asked 0.06)")));

  Close();
  ASSERT_THAT(Open(), IsOk());
  EXPECT_THAT(store_->CreateTable(config), IsOkAndHolds(false));
  EXPECT_THAT(store_->CreateTable(other),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_EQ(store_->ListTables().size(), 1u);
  EXPECT_EQ(store_->ListTables()[0].config.dim, 8u);
}

TEST_P(EmbeddingStoreDurabilityTest, CreateTableRejectsInvalidConfig) {
  ASSERT_THAT(Open(), IsOk());
  EmbeddingTableConfig config = TableConfigs()[0];
  config.dim = 0;
  EXPECT_THAT(store_->CreateTable(config),
              StatusIs(absl::StatusCode::kInvalidArgument));
  config = TableConfigs()[0];
  config.name = "../escape";
  EXPECT_THAT(store_->CreateTable(config),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->ListTables(), IsEmpty());
}

TEST_P(EmbeddingStoreDurabilityTest, UnknownTableIsNotFound) {
  OpenWithTables();
  EXPECT_THAT(store_->GetTableConfig("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  std::vector<float> out(8);
  const std::vector<FeatureId> keys = {1};
  EXPECT_THAT(store_->Lookup("nope", keys, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kNotFound));
  std::vector<Batch> push = {{"nope", {1}, std::vector<float>(8, 1.0f)}};
  EXPECT_THAT(Push(push), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(EmbeddingStoreDurabilityTest, LookupRejectsOutputOfWrongSize) {
  OpenWithTables();
  const std::vector<FeatureId> keys = {1, 2};
  std::vector<float> out(15);  // user has dim 8: 16 needed.
  EXPECT_THAT(store_->Lookup("user", keys, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  out.resize(17);
  EXPECT_THAT(store_->Lookup("user", keys, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(EmbeddingStoreDurabilityTest,
       InvalidPushChangesNoRowAndLeavesItsIdUnused) {
  OpenWithTables();
  ReferenceTables reference(TableConfigs());
  std::mt19937 rng(2);
  const std::vector<Batch> first = MakePush(rng);
  ASSERT_THAT(Push(first), IsOk());
  reference.Apply(first);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> gradient_of_one_key(8, 0.5f);
  const Batch good_user = {"user", {1, 2, 3}, std::vector<float>(24, 0.5f)};
  const Batch good_item = {"item", {4, 5}, std::vector<float>(8, -0.5f)};
  auto with = [](std::vector<float> gradients, size_t at, float value) {
    gradients[at] = value;
    return gradients;
  };
  const struct {
    const char* what;
    std::vector<Batch> push;
    absl::StatusCode code;
  } cases[] = {
      {"unknown table second",
       {good_user, {"nope", {1}, {1.0f}}},
       absl::StatusCode::kNotFound},
      {"too few gradients",
       {good_user, {"item", {4, 5}, std::vector<float>(7, 1.0f)}},
       absl::StatusCode::kInvalidArgument},
      {"too many gradients",
       {good_user, {"item", {4, 5}, std::vector<float>(9, 1.0f)}},
       absl::StatusCode::kInvalidArgument},
      {"no gradients",
       {good_user, {"item", {4, 5}, {}}},
       absl::StatusCode::kInvalidArgument},
      {"NaN",
       {good_user, {"item", {4, 5}, with(good_item.gradients, 7, nan)}},
       absl::StatusCode::kInvalidArgument},
      {"+Inf",
       {good_user, {"item", {4, 5}, with(good_item.gradients, 0, inf)}},
       absl::StatusCode::kInvalidArgument},
      {"-Inf",
       {good_user, {"item", {4, 5}, with(good_item.gradients, 3, -inf)}},
       absl::StatusCode::kInvalidArgument},
      {"empty keys",
       {good_user, {"item", {}, {}}},
       absl::StatusCode::kInvalidArgument},
      {"bad batch first",
       {{"user", {1}, with(gradient_of_one_key, 2, nan)}, good_item},
       absl::StatusCode::kInvalidArgument},
  };
  uint64_t sequence = 100;
  for (const auto& c : cases) {
    const PushId id{"client", ++sequence};
    EXPECT_THAT(Push(c.push, id), StatusIs(c.code)) << c.what;
    ExpectMatchesReference(reference);
    // The id was not used up: the same id with a valid push is applied.
    const std::vector<Batch> valid = {good_user, good_item};
    EXPECT_THAT(Push(valid, id), IsOkAndHolds(false)) << c.what;
    reference.Apply(valid);
    ExpectMatchesReference(reference);
  }
  Close();
  ASSERT_THAT(Open(), IsOk());
  ExpectMatchesReference(reference);
}

// Batches of more than 64 values are checked a block at a time: a bad value
// at either edge of a block, or in the part after the last whole block, is
// found and named by its key; values at the bound pass.
TEST_P(EmbeddingStoreDurabilityTest,
       GradientBoundHoldsAtEveryPositionOfABatch) {
  OpenWithTables();
  ReferenceTables reference(TableConfigs());
  constexpr size_t kKeys = 20;  // "user" has dim 8: 160 values.
  std::vector<FeatureId> keys(kKeys);
  for (size_t k = 0; k < kKeys; ++k) keys[k] = 1000 + k;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float bad_values[] = {nan, -nan, inf, -inf, 1.0001e9f, -3e38f};
  uint64_t sequence = 0;
  for (size_t position : {size_t{0}, size_t{63}, size_t{64}, size_t{127},
                          size_t{128}, size_t{159}}) {
    for (float bad : bad_values) {
      std::vector<float> gradients(kKeys * 8, 0.25f);
      gradients[position] = bad;
      const FeatureId named = keys[position / 8];
      EXPECT_THAT(
          Push({{"user", keys, gradients}}, PushId{"client", ++sequence}),
          StatusIs(absl::StatusCode::kInvalidArgument,
                   HasSubstr(absl::StrCat("key ", named, " "))))
          << "value " << bad << " at " << position;
    }
  }
  ExpectMatchesReference(reference);

  std::vector<float> at_bound(kKeys * 8, -0.0f);
  at_bound[0] = 1e9f;
  at_bound[64] = -1e9f;
  at_bound[159] = std::numeric_limits<float>::denorm_min();
  const std::vector<Batch> push = {{"user", keys, at_bound}};
  EXPECT_THAT(Push(push, PushId{"client", ++sequence}), IsOkAndHolds(false));
  reference.Apply(push);
  ExpectMatchesReference(reference);
}

TEST_P(EmbeddingStoreDurabilityTest, SamePushIdTwiceIsAppliedOnce) {
  OpenWithTables();
  ReferenceTables reference(TableConfigs());
  std::mt19937 rng(3);
  const std::vector<Batch> push = MakePush(rng);
  const PushId id{"worker-0", 1};
  EXPECT_THAT(Push(push, id), IsOkAndHolds(false));
  reference.Apply(push);
  EXPECT_THAT(Push(push, id), IsOkAndHolds(true));
  ExpectMatchesReference(reference);

  // Another client with the same sequence is another push.
  EXPECT_THAT(Push(push, PushId{"worker-1", 1}), IsOkAndHolds(false));
  reference.Apply(push);
  // Without a client id there is no deduplication.
  EXPECT_THAT(Push(push), IsOkAndHolds(false));
  EXPECT_THAT(Push(push), IsOkAndHolds(false));
  reference.Apply(push);
  reference.Apply(push);
  // Sequences may arrive out of order.
  EXPECT_THAT(Push(push, PushId{"worker-0", 3}), IsOkAndHolds(false));
  EXPECT_THAT(Push(push, PushId{"worker-0", 2}), IsOkAndHolds(false));
  EXPECT_THAT(Push(push, PushId{"worker-0", 3}), IsOkAndHolds(true));
  reference.Apply(push);
  reference.Apply(push);
  ExpectMatchesReference(reference);
}

TEST_F(EmbeddingStoreTest, PushWithSequenceZeroIsApplied) {
  // PushId's default sequence is 0 and nothing says sequences start at 1,
  // so a client's first push may well carry 0.
  OpenWithTables();
  ReferenceTables reference(TableConfigs());
  std::mt19937 rng(4);
  const std::vector<Batch> push = MakePush(rng);
  EXPECT_THAT(Push(push, PushId{"fresh-client", 0}), IsOkAndHolds(false));
  reference.Apply(push);
  ExpectMatchesReference(reference);
}

TEST_P(EmbeddingStoreDurabilityTest, DeduplicationSurvivesReopen) {
  OpenWithTables();
  ReferenceTables reference(TableConfigs());
  std::mt19937 rng(5);
  const std::vector<Batch> push = MakePush(rng);
  for (uint64_t sequence : {1, 2, 5}) {
    ASSERT_THAT(Push(push, PushId{"worker-0", sequence}), IsOkAndHolds(false));
    reference.Apply(push);
  }
  ASSERT_THAT(store_->Flush(), IsOk());
  Close();

  ASSERT_THAT(Open(), IsOk());
  for (uint64_t sequence : {1, 2, 5}) {
    EXPECT_THAT(Push(push, PushId{"worker-0", sequence}), IsOkAndHolds(true))
        << sequence;
  }
  ExpectMatchesReference(reference);
  EXPECT_THAT(Push(push, PushId{"worker-0", 3}), IsOkAndHolds(false));
  reference.Apply(push);
  ExpectMatchesReference(reference);

  // Close without an explicit Flush: closing writes what is buffered.
  Close();
  ASSERT_THAT(Open(), IsOk());
  EXPECT_THAT(Push(push, PushId{"worker-0", 3}), IsOkAndHolds(true));
  ExpectMatchesReference(reference);
}

TEST_P(EmbeddingStoreDurabilityTest,
       RestoreReturnsRowsAndStateOfCheckpointMoment) {
  OpenWithTables();
  ReferenceTables at_checkpoint(TableConfigs());
  std::mt19937 rng(6);
  for (int i = 0; i < 4; ++i) {
    const std::vector<Batch> push = MakePush(rng);
    ASSERT_THAT(Push(push, PushId{"w", uint64_t(i + 1)}), IsOk());
    at_checkpoint.Apply(push);
  }
  absl::StatusOr<CheckpointInfo> info = store_->Checkpoint("step-40", 40);
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ(info->checkpoint_id, "step-40");
  EXPECT_EQ(info->global_step, 40u);
  uint64_t rows = 0;
  for (const EmbeddingTableConfig& config : TableConfigs()) {
    rows += at_checkpoint.num_rows(config.name);
  }
  EXPECT_EQ(info->num_rows, rows);
  const auto pulled_at_checkpoint = PullAll();

  // Later pushes, to rows old and new, and a table the checkpoint lacks.
  EmbeddingTableConfig later = TableConfigs()[2];
  later.name = "later";
  ASSERT_THAT(store_->CreateTable(later), IsOk());
  for (int i = 0; i < 3; ++i) {
    std::vector<Batch> push = MakePush(rng);
    push.push_back({"later", {1}, {1.0f}});
    push[0].keys.push_back(kKeyRange + 7);  // A row born after the checkpoint.
    push[0].gradients.resize(push[0].gradients.size() + 8, 0.25f);
    ASSERT_THAT(Push(push, PushId{"w", uint64_t(10 + i)}), IsOk());
  }
  ASSERT_NE(PullAll(), pulled_at_checkpoint);

  info = store_->Restore("step-40");
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ(info->checkpoint_id, "step-40");
  EXPECT_EQ(info->global_step, 40u);
  EXPECT_EQ(info->num_rows, rows);
  EXPECT_EQ(PullAll(), pulled_at_checkpoint);
  ExpectMatchesReference(at_checkpoint);
  EXPECT_THAT(store_->GetTableConfig("later"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(store_->ListTables().size(), 3u);
  // A push applied before the checkpoint is still known.
  EXPECT_THAT(Push(MakePush(rng), PushId{"w", 1}), IsOkAndHolds(true));

  // Optimizer state is the checkpoint's: the same push gives the same rows.
  const std::vector<Batch> push = MakePush(rng);
  ASSERT_THAT(Push(push), IsOk());
  at_checkpoint.Apply(push);
  ExpectMatchesReference(at_checkpoint);

  // The restored store is the one that persists.
  Close();
  ASSERT_THAT(Open(), IsOk());
  ExpectMatchesReference(at_checkpoint);
  EXPECT_THAT(store_->GetTableConfig("later"),
              StatusIs(absl::StatusCode::kNotFound));

  // The checkpoint itself is unchanged by what happened after the restore.
  ASSERT_THAT(store_->Restore("step-40"), IsOk());
  EXPECT_EQ(PullAll(), pulled_at_checkpoint);
}

TEST_P(EmbeddingStoreDurabilityTest, CheckpointIdsAreValidatedAndUnique) {
  OpenWithTables();
  for (const std::string& bad :
       {std::string("../x"), std::string(""), std::string(".hidden"),
        std::string("a/b"), std::string("a b"), std::string(".."),
        std::string(".staging-x"), std::string(129, 'c')}) {
    EXPECT_THAT(store_->Checkpoint(bad, 1),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
    EXPECT_THAT(store_->Restore(bad),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(temp_dir_ + "/x"));
  EXPECT_THAT(store_->ListCheckpoints(), IsEmpty());

  ASSERT_THAT(store_->Checkpoint("b", 2), IsOk());
  ASSERT_THAT(store_->Checkpoint("a.1", 1), IsOk());
  ASSERT_THAT(store_->Checkpoint(std::string(128, 'c'), 3), IsOk());
  EXPECT_THAT(store_->Checkpoint("b", 5),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(store_->Restore("missing"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->ListCheckpoints(),
              ElementsAre("a.1", "b", std::string(128, 'c')));

  Close();
  ASSERT_THAT(Open(), IsOk());
  EXPECT_THAT(store_->ListCheckpoints(),
              ElementsAre("a.1", "b", std::string(128, 'c')));
  EXPECT_THAT(store_->Checkpoint("a.1", 9),
              StatusIs(absl::StatusCode::kAlreadyExists));
  STRATA_ASSERT_OK_AND_ASSIGN(const CheckpointInfo info, store_->Restore("b"));
  EXPECT_EQ(info.global_step, 2u);
}

TEST_P(EmbeddingStoreDurabilityTest, OpenOfCorruptStoreFailsCleanly) {
  OpenWithTables();
  std::mt19937 rng(7);
  ASSERT_THAT(Push(MakePush(rng)), IsOk());
  Close();
  {
    std::ofstream current(data_dir_ + "/db/CURRENT",
                          std::ios::binary | std::ios::trunc);
    current << "\x01garbage\xff";
  }
  EXPECT_THAT(Open(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(store_, nullptr);
}

TEST_F(EmbeddingStoreTest, HugeFiniteGradientNeverMakesRowsNonFinite) {
  // Validation rejects NaN and Inf so that rows stay finite, but a finite
  // gradient above sqrt(FLT_MAX) ~ 1.8e19 overflows g * g inside the
  // optimizers. Either reject it or keep the row finite.
  ASSERT_THAT(Open(), IsOk());
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kAdagrad,
                             OptimizerType::kAdam, OptimizerType::kFtrl}) {
    EmbeddingTableConfig config;
    config.name = std::string(OptimizerName(type));
    config.dim = 2;
    config.initializer.type = InitializerType::kUniform;
    config.optimizer.type = type;
    ASSERT_THAT(store_->CreateTable(config), IsOk());
    for (const std::vector<float>& gradient :
         {std::vector<float>{3e19f, -3e19f}, std::vector<float>{0.1f, 0.1f}}) {
      const absl::StatusOr<bool> pushed = Push({{config.name, {1}, gradient}});
      if (!pushed.ok()) {
        EXPECT_THAT(pushed, StatusIs(absl::StatusCode::kInvalidArgument));
      }
      for (float value : Pull(config.name, {1})) {
        EXPECT_TRUE(std::isfinite(value))
            << config.name << " after a gradient of " << gradient[0] << ": "
            << value;
      }
    }
  }
}

TEST_F(EmbeddingStoreTest, FailedRestoreOfCorruptCheckpointKeepsLiveRows) {
  OpenWithTables();
  ReferenceTables reference(TableConfigs());
  std::mt19937 rng(9);
  for (int i = 0; i < 2; ++i) {
    const std::vector<Batch> push = MakePush(rng);
    ASSERT_THAT(Push(push), IsOk());
    reference.Apply(push);
    if (i == 0) {
      ASSERT_THAT(store_->Checkpoint("c1", 1), IsOk());
    }
  }
  CorruptCheckpointCurrent("c1");
  EXPECT_THAT(store_->Restore("c1"), StatusIs(absl::StatusCode::kDataLoss));
  ExpectMatchesReference(reference);
  // A bad checkpoint must not cost the live store.
  Close();
  ASSERT_THAT(Open(), IsOk());
  ExpectMatchesReference(reference);
}

using EmbeddingStoreDeathTest = EmbeddingStoreTest;

// Sets an environment variable for its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_value_ = old != nullptr;
    if (had_value_) old_value_ = old;
    EXPECT_EQ(::setenv(name, value.c_str(), 1), 0);
  }
  ~ScopedEnv() {
    if (had_value_) {
      ::setenv(name_, old_value_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_value_;
  std::string old_value_;
};

TEST_F(EmbeddingStoreDeathTest, PushAfterFailedRestoreDoesNotCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child process runs this test again from the start. Let it make its
  // directory inside ours, which TearDown removes even if the child crashed.
  const ScopedEnv tmpdir("TEST_TMPDIR", temp_dir_);
  OpenWithTables();
  std::mt19937 rng(10);
  ASSERT_THAT(Push(MakePush(rng)), IsOk());
  ASSERT_THAT(store_->Checkpoint("c1", 1), IsOk());
  CorruptCheckpointCurrent("c1");
  EXPECT_THAT(store_->Restore("c1"), Not(IsOk()));
  // In a child process: any status is fine, a crash is not.
  EXPECT_EXIT(
      {
        Push(MakePush(rng)).IgnoreError();
        store_->Flush().IgnoreError();
        std::vector<float> out(8);
        const std::vector<FeatureId> keys = {1};
        store_->Lookup("user", keys, absl::MakeSpan(out)).IgnoreError();
        Close();
        std::filesystem::remove_all(temp_dir_);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(EmbeddingStoreTest, OpenOfCorruptStoreIsDataLoss) {
  // EmbeddingStore::Open documents DATA_LOSS for a corrupt store.
  OpenWithTables();
  Close();
  {
    std::ofstream current(data_dir_ + "/db/CURRENT",
                          std::ios::binary | std::ios::trunc);
    current << "MANIFEST-999999\n";  // Names a manifest that is not there.
  }
  EXPECT_THAT(Open(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(EmbeddingStoreTest, DataDirThatIsAFileIsAnError) {
  {
    std::ofstream file(data_dir_);
    file << "not a directory";
  }
  EXPECT_THAT(Open(),
              StatusIs(Not(absl::StatusCode::kOk), HasSubstr(data_dir_)));
  EXPECT_EQ(store_, nullptr);
}

TEST_F(EmbeddingStoreTest, OpenRejectsBadOptions) {
  EmbeddingStoreOptions options = Options();
  options.data_dir = "";
  EXPECT_THAT(EmbeddingStore::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options = Options();
  options.durability = Durability::kPeriodic;
  options.flush_interval = absl::ZeroDuration();
  EXPECT_THAT(EmbeddingStore::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("flush")));
  EXPECT_FALSE(std::filesystem::exists(data_dir_));
}

// Bytes of the write-ahead log files in RocksDB's directory of the store.
uint64_t LogBytes(const std::string& data_dir) {
  uint64_t bytes = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(data_dir + "/db")) {
    if (entry.path().extension() == ".log") bytes += entry.file_size();
  }
  return bytes;
}

TEST_F(EmbeddingStoreTest, WriteAheadLogStaysWithinFourMemtables) {
  // The table's record sits in the first log and its family ("default")
  // takes no other write here, so nothing but the bound on the logs' total
  // size ever lets a log go: by RocksDB's own bound (four times every
  // memtable) 24 MiB of log would pile up, and a restart replay it.
  constexpr size_t kWriteBuffer = size_t{1} << 20;
  EmbeddingStoreOptions options = Options();
  options.write_buffer_bytes = kWriteBuffer;
  absl::StatusOr<std::unique_ptr<EmbeddingStore>> opened =
      EmbeddingStore::Open(options);
  ASSERT_THAT(opened, IsOk());
  store_ = std::move(opened).value();
  EmbeddingTableConfig config;
  config.name = "wide";
  config.dim = 64;
  config.optimizer.type = OptimizerType::kSgd;
  ASSERT_THAT(store_->CreateTable(config), IsOk());
  // 40 pushes of 2048 rows of 256 bytes: 21 MiB of log.
  std::vector<FeatureId> keys(2048);
  const std::vector<float> gradients(keys.size() * config.dim, 0.5f);
  for (FeatureId push = 0; push < 40; ++push) {
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = push * keys.size() + i;
    const std::vector<GradientBatch> batches = {{config.name, keys, gradients}};
    ASSERT_THAT(store_->ApplyGradients(batches, PushId()), IsOk());
  }
  // The flushes that free old logs run in the background.
  const uint64_t bound = 4 * kWriteBuffer + kWriteBuffer;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (LogBytes(data_dir_) > bound && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LE(LogBytes(data_dir_), bound);
  // Nothing was lost by flushing early.
  Close();
  ASSERT_THAT(Open(), IsOk());
  const std::vector<float> row = Pull("wide", {0, 81919});
  ASSERT_EQ(row.size(), 2u * config.dim);
  EmbeddingTable reference(config, 1);
  std::vector<float> expected(2 * config.dim);
  const std::vector<FeatureId> probe = {0, 81919};
  reference.ApplyGradients(probe, gradients.data(), false, nullptr);
  reference.Lookup(probe, expected.data());
  EXPECT_EQ(row, expected);
}

INSTANTIATE_TEST_SUITE_P(AllDurabilities, EmbeddingStoreDurabilityTest,
                         ::testing::Values(Durability::kSync,
                                           Durability::kGroup,
                                           Durability::kPeriodic),
                         [](const auto& info) { return Name(info.param); });

TEST(DurabilityTest, NamesRoundTrip) {
  for (Durability durability :
       {Durability::kSync, Durability::kGroup, Durability::kPeriodic}) {
    EXPECT_THAT(ParseDurability(DurabilityName(durability)),
                IsOkAndHolds(durability));
  }
  EXPECT_EQ(DurabilityName(Durability::kSync), "sync");
  EXPECT_EQ(DurabilityName(Durability::kGroup), "group");
  EXPECT_EQ(DurabilityName(Durability::kPeriodic), "periodic");
  EXPECT_THAT(ParseDurability("async"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace strata
