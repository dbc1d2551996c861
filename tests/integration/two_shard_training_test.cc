// Training through PsClient against two strata-server processes gives the
// same rows, bit for bit, as one local EmbeddingTable fed the same
// (deduplicated, summed) gradients.

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "embedding/embedding_table.h"
#include "embedding/table_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "server/table_config_proto.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::strata::testing::ServerProcessOptions;

constexpr int kSteps = 120;
constexpr size_t kBatch = 256;
constexpr uint64_t kVocabulary = 5000;

EmbeddingTableConfig AdagradConfig() {
  EmbeddingTableConfig config;
  config.name = "adagrad";
  config.dim = 8;
  config.seed = 3;
  config.initializer.type = InitializerType::kUniform;
  config.initializer.min = -0.1f;
  config.initializer.max = 0.1f;
  config.optimizer.type = OptimizerType::kAdagrad;
  config.optimizer.learning_rate = 0.05f;
  config.optimizer.initial_accumulator = 0.1f;
  return config;
}

EmbeddingTableConfig AdamConfig() {
  EmbeddingTableConfig config;
  config.name = "adam";
  config.dim = 16;
  config.seed = 4;
  config.initializer.type = InitializerType::kTruncatedNormal;
  config.initializer.stddev = 0.05f;
  config.optimizer.type = OptimizerType::kAdam;
  config.optimizer.learning_rate = 0.01f;
  return config;
}

// Zipf-ish ids: log-uniform over [1, kVocabulary], so small ids repeat
// often (within a batch too) and large ones rarely; scattered over the
// 64-bit space so that they land on both shards.
uint64_t SkewedKey(std::mt19937_64& random) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const uint64_t rank = static_cast<uint64_t>(
      std::floor(std::pow(static_cast<double>(kVocabulary), unit(random))));
  return rank * 0x9E3779B97F4A7C15ull;
}

// Number of values where `actual` and `expected` differ; prints the first.
size_t CountMismatches(const std::vector<float>& actual,
                       const std::vector<float>& expected,
                       const std::vector<uint64_t>& keys, uint32_t dim,
                       const std::string& what) {
  size_t mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] == expected[i]) continue;
    if (++mismatches <= 3) {
      ADD_FAILURE() << what << ": key " << keys[i / dim] << " coordinate "
                    << i % dim << " is " << actual[i] << ", reference "
                    << expected[i];
    }
  }
  return mismatches;
}

// One worker training one table for kSteps: pull a batch (which must equal
// the reference), push gradients, apply the same to the reference.
void Train(PsClient& client, const EmbeddingTableConfig& config,
           EmbeddingTable& reference, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<float> gradient(0.0f, 1.0f);
  const uint32_t dim = config.dim;
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> rows(kBatch * dim), expected(kBatch * dim);
  std::vector<float> gradients(kBatch * dim);
  for (int step = 0; step < kSteps; ++step) {
    for (uint64_t& key : keys) key = SkewedKey(random);
    ASSERT_THAT(client.Pull(config.name, keys, absl::MakeSpan(rows)), IsOk());
    reference.Lookup(keys, expected.data());
    ASSERT_EQ(CountMismatches(rows, expected, keys, dim,
                              absl::StrCat(config.name, " step ", step)),
              0u);
    for (float& g : gradients) g = gradient(random);
    ASSERT_THAT(client.Push(config.name, keys, gradients), IsOk());

    // What PsClient sends: each key once, its gradients summed in order.
    std::vector<uint64_t> unique;
    std::vector<float> summed;
    absl::flat_hash_map<uint64_t, size_t> index;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, inserted] = index.try_emplace(keys[i], unique.size());
      if (inserted) {
        unique.push_back(keys[i]);
        summed.resize(summed.size() + dim, 0.0f);
      }
      for (uint32_t d = 0; d < dim; ++d) {
        summed[it->second * dim + d] += gradients[i * dim + d];
      }
    }
    reference.ApplyGradients(unique, summed.data(), false, nullptr);
  }
}

TEST(TwoShardTrainingTest, RowsEqualALocalReferenceAfterSkewedTraining) {
  std::vector<std::unique_ptr<ServerProcess>> shards;
  std::vector<std::string> addresses;
  for (int shard = 0; shard < 2; ++shard) {
    ServerProcessOptions options;
    options.flags = {"--num_shards=2", absl::StrCat("--shard_index=", shard)};
    shards.push_back(std::make_unique<ServerProcess>(options));
    ASSERT_THAT(shards.back()->Start(), IsOk());
    addresses.push_back(shards.back()->address());
  }
  const std::vector<EmbeddingTableConfig> configs = {AdagradConfig(),
                                                     AdamConfig()};
  std::vector<std::unique_ptr<PsClient>> workers;
  std::vector<std::unique_ptr<EmbeddingTable>> references;
  for (size_t t = 0; t < configs.size(); ++t) {
    PsClientOptions options;
    options.shard_addresses = addresses;
    STRATA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<PsClient> client,
                                PsClient::Create(options));
    const v1::TableConfig proto = TableConfigToProto(configs[t]);
    // The servers must build exactly the reference's config from the wire.
    STRATA_ASSERT_OK_AND_ASSIGN(EmbeddingTableConfig parsed,
                                TableConfigFromProto(proto));
    ASSERT_TRUE(SameTableConfig(parsed, configs[t])) << configs[t].name;
    ASSERT_THAT(client->CreateTable(proto), IsOk());
    workers.push_back(std::move(client));
    references.push_back(std::make_unique<EmbeddingTable>(configs[t], 1));
  }

  // One worker per table, concurrently.
  std::vector<std::thread> threads;
  for (size_t t = 0; t < configs.size(); ++t) {
    threads.emplace_back(
        [&, t] { Train(*workers[t], configs[t], *references[t], 100 + t); });
  }
  for (std::thread& thread : threads) thread.join();

  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<v1::TableInfo> tables,
                              workers[0]->ListTables());
  ASSERT_EQ(tables.size(), configs.size());
  for (size_t t = 0; t < configs.size(); ++t) {
    // Every touched row, from a fresh pull.
    std::set<uint64_t> touched;
    references[t]->ForEachRow([&](FeatureId key, const float*, const float*) {
      touched.insert(key);
    });
    const std::vector<uint64_t> keys(touched.begin(), touched.end());
    EXPECT_GT(keys.size(), 1000u);
    const uint32_t dim = configs[t].dim;
    std::vector<float> rows(keys.size() * dim), expected(keys.size() * dim);
    ASSERT_THAT(workers[t]->Pull(configs[t].name, keys, absl::MakeSpan(rows)),
                IsOk());
    references[t]->Lookup(keys, expected.data());
    EXPECT_EQ(CountMismatches(rows, expected, keys, dim, configs[t].name), 0u);
    const v1::TableInfo& info = tables[t];
    EXPECT_EQ(info.config().name(), configs[t].name);
    EXPECT_EQ(info.num_rows(), keys.size()) << configs[t].name;
  }
  // Both shards took part in both tables.
  STRATA_ASSERT_OK_AND_ASSIGN(std::vector<v1::StatsResponse> stats,
                              workers[0]->Stats());
  for (const v1::StatsResponse& shard : stats) {
    ASSERT_EQ(shard.tables_size(), 2);
    EXPECT_GT(shard.tables(0).num_rows(), 0u);
    EXPECT_GT(shard.tables(1).num_rows(), 0u);
  }
}

}  // namespace
}  // namespace strata
