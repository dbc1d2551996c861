// Value snapshots (EmbeddingStore::OpenValueSnapshot), in every durability
// mode: consistent with the sequence they were opened at while pushes go
// on, read in chunks bounded by rows and bytes, and aborted (never a crash)
// when the store is restored under them.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "embedding/embedding_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {

void PrintTo(Durability durability, std::ostream* os) {
  *os << DurabilityName(durability);
}

namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;

class ValueSnapshotTest : public ::testing::TestWithParam<Durability> {
 protected:
  void SetUp() override {
    SetMinLogLevel(LogLevel::kWarning);
    EmbeddingStoreOptions options;
    options.data_dir = dir_.path() + "/data";
    options.durability = GetParam();
    options.flush_interval = absl::Hours(1);
    options.eviction_interval = absl::ZeroDuration();
    absl::StatusOr<std::unique_ptr<EmbeddingStore>> store =
        EmbeddingStore::Open(options);
    ASSERT_THAT(store.status(), IsOk());
    store_ = std::move(store).value();
  }

  void CreateTable(const std::string& name, uint32_t dim) {
    EmbeddingTableConfig config;
    config.name = name;
    config.dim = dim;
    config.optimizer.type = OptimizerType::kSgd;
    config.optimizer.learning_rate = 1.0f;
    ASSERT_THAT(store_->CreateTable(config), IsOk());
  }

  // Gives keys [0, rows) of `table` the value -g in every element.
  void Push(const std::string& table, uint32_t dim, FeatureId rows, float g) {
    for (FeatureId begin = 0; begin < rows; begin += 1000) {
      std::vector<FeatureId> keys;
      for (FeatureId key = begin; key < std::min<FeatureId>(rows, begin + 1000);
           ++key) {
        keys.push_back(key);
      }
      const std::vector<float> gradients(keys.size() * dim, g);
      const GradientBatch batch{table, keys, gradients};
      ASSERT_THAT(store_->ApplyGradients({batch}, PushId()), IsOk());
    }
  }

  // Every chunk of `reader`: key -> first element, per table, and the
  // largest chunk seen.
  struct Read {
    std::map<std::string, std::map<FeatureId, float>> rows;
    size_t largest_chunk_rows = 0;
    size_t largest_chunk_bytes = 0;
    int chunks = 0;
  };
  Read ReadAll(ValueSnapshotReader& reader) {
    Read read;
    ChangedRows chunk;
    while (true) {
      absl::StatusOr<bool> more = reader.Next(chunk);
      EXPECT_THAT(more.status(), IsOk());
      if (!more.ok() || !*more) break;
      ++read.chunks;
      EXPECT_FALSE(chunk.keys.empty());
      EXPECT_EQ(chunk.values.size(), chunk.keys.size() * chunk.dim);
      read.largest_chunk_rows =
          std::max(read.largest_chunk_rows, chunk.keys.size());
      read.largest_chunk_bytes = std::max(read.largest_chunk_bytes,
                                          chunk.values.size() * sizeof(float));
      for (size_t i = 0; i < chunk.keys.size(); ++i) {
        auto [it, fresh] = read.rows[chunk.table].emplace(
            chunk.keys[i], chunk.values[i * chunk.dim]);
        EXPECT_TRUE(fresh) << "key " << chunk.keys[i] << " twice";
      }
    }
    return read;
  }

  testing::TempDir dir_{"value_snapshot"};
  std::unique_ptr<EmbeddingStore> store_;
};

TEST_P(ValueSnapshotTest, HoldsTheRowsOfItsSequenceWhilePushesGoOn) {
  CreateTable("a", 8);
  CreateTable("b", 2);
  Push("a", 8, 10000, 1.0f);
  Push("b", 2, 300, 2.0f);
  const uint64_t sequence = store_->change_log().latest_sequence();
  absl::StatusOr<std::unique_ptr<ValueSnapshotReader>> reader =
      store_->OpenValueSnapshot({});
  ASSERT_THAT(reader.status(), IsOk());
  EXPECT_EQ((*reader)->sequence(), sequence);
  EXPECT_EQ((*reader)->incarnation(), store_->change_log().incarnation());
  ASSERT_EQ((*reader)->tables().size(), 2u);
  // Pushes after the snapshot change every row and add new ones.
  Push("a", 8, 12000, 1.0f);
  Push("b", 2, 400, 2.0f);

  const Read read = ReadAll(**reader);
  ASSERT_EQ(read.rows.at("a").size(), 10000u);
  ASSERT_EQ(read.rows.at("b").size(), 300u);
  for (const auto& [key, value] : read.rows.at("a")) {
    ASSERT_EQ(value, -1.0f) << "key " << key;
  }
  for (const auto& [key, value] : read.rows.at("b")) {
    ASSERT_EQ(value, -2.0f) << "key " << key;
  }
  EXPECT_LE(read.largest_chunk_rows, kSnapshotChunkRows);
}

TEST_P(ValueSnapshotTest, OneTableAndChunksBoundedByBytes) {
  CreateTable("wide", 4096);
  CreateTable("other", 1);
  Push("wide", 4096, 600, 1.0f);
  Push("other", 1, 10, 1.0f);
  absl::StatusOr<std::unique_ptr<ValueSnapshotReader>> reader =
      store_->OpenValueSnapshot({"wide"});
  ASSERT_THAT(reader.status(), IsOk());
  const Read read = ReadAll(**reader);
  EXPECT_EQ(read.rows.size(), 1u);
  EXPECT_EQ(read.rows.at("wide").size(), 600u);
  // 16 KiB rows: 256 to a 4 MiB chunk.
  EXPECT_EQ(read.largest_chunk_bytes, kSnapshotChunkBytes);
  EXPECT_EQ(read.chunks, 3);

  EXPECT_THAT(store_->OpenValueSnapshot({"missing"}).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(ValueSnapshotTest, ARestoreUnderAReaderAbortsIt) {
  CreateTable("a", 4);
  Push("a", 4, 9000, 1.0f);
  ASSERT_THAT(store_->Checkpoint("c", 1).status(), IsOk());
  absl::StatusOr<std::unique_ptr<ValueSnapshotReader>> reader =
      store_->OpenValueSnapshot({});
  ASSERT_THAT(reader.status(), IsOk());
  ChangedRows chunk;
  ASSERT_THAT((*reader)->Next(chunk), IsOk());
  ASSERT_THAT(store_->Restore("c").status(), IsOk());
  EXPECT_THAT((*reader)->Next(chunk).status(),
              StatusIs(absl::StatusCode::kAborted));
  reader->reset();
  // A new reader after the restore reads the restored rows.
  absl::StatusOr<std::unique_ptr<ValueSnapshotReader>> again =
      store_->OpenValueSnapshot({});
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(ReadAll(**again).rows.at("a").size(), 9000u);
}

INSTANTIATE_TEST_SUITE_P(EveryDurability, ValueSnapshotTest,
                         ::testing::Values(Durability::kSync,
                                           Durability::kGroup,
                                           Durability::kPeriodic),
                         [](const ::testing::TestParamInfo<Durability>& info) {
                           return std::string(DurabilityName(info.param));
                         });

}  // namespace
}  // namespace strata
