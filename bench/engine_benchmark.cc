// Google Benchmark micro-benchmarks of the engine's hot paths, without the
// network: batch lookups and optimizer updates on an in-memory table, fp16
// conversion, the raw pull wire format, the serving PS's row cache, and the
// worker's dot interaction and whole model step.
//
// Run: build/bin/strata-engine-benchmark --benchmark_min_time=1
// (STRATA_HUGE_PAGES=0 keeps the tables' rows on 4 KiB pages.)

#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/fp16.h"
#include "common/huge_page_allocator.h"
#include "common/pull_wire.h"
#include "embedding/embedding_table.h"
#include "embedding/initializer.h"
#include "serving/internal/row_cache.h"
#include "worker/model/dense_model.h"
#include "worker/model/internal/cpu_kernels.h"
#include "worker/model/model_config.h"

namespace strata {
namespace {

constexpr uint32_t kDim = 64;
constexpr uint64_t kRows = 1 << 20;

EmbeddingTableConfig Config(OptimizerType optimizer) {
  EmbeddingTableConfig config;
  config.name = "bench";
  config.dim = kDim;
  config.initializer.type = InitializerType::kUniform;
  config.optimizer.type = optimizer;
  return config;
}

// A table with kRows rows already written.
EmbeddingTable& FilledTable(OptimizerType optimizer) {
  // STRATA_HUGE_PAGES=0 measures the rows on 4 KiB pages.
  static const bool huge_pages = [] {
    const char* value = std::getenv("STRATA_HUGE_PAGES");
    SetHugePagesEnabled(value == nullptr || std::string(value) != "0");
    return true;
  }();
  (void)huge_pages;
  static auto* tables = new std::vector<std::unique_ptr<EmbeddingTable>>(4);
  auto& table = (*tables)[static_cast<size_t>(optimizer)];
  if (table == nullptr) {
    table = std::make_unique<EmbeddingTable>(Config(optimizer), 1);
    std::vector<FeatureId> keys(8192);
    std::vector<float> gradients(keys.size() * kDim, 0.01f);
    for (uint64_t start = 0; start < kRows; start += keys.size()) {
      for (size_t i = 0; i < keys.size(); ++i) keys[i] = start + i;
      table->ApplyGradients(keys, gradients.data(), false, nullptr);
    }
  }
  return *table;
}

std::vector<FeatureId> RandomKeys(size_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<FeatureId> keys(count);
  for (FeatureId& key : keys) key = random() % kRows;
  return keys;
}

void BM_Lookup(benchmark::State& state) {
  EmbeddingTable& table = FilledTable(OptimizerType::kAdagrad);
  const std::vector<FeatureId> keys =
      RandomKeys(static_cast<size_t>(state.range(0)), 1);
  std::vector<float> out(keys.size() * kDim);
  for (auto _ : state) {
    table.Lookup(keys, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() * state.range(0) * kDim * 4);
}
BENCHMARK(BM_Lookup)->Arg(1000)->Arg(8192);

// As a shard sees them: every batch draws other rows, so few are in the
// CPU's caches (256 batches of 8192 cover 2M draws of 1M rows).
void BM_LookupUncached(benchmark::State& state) {
  EmbeddingTable& table = FilledTable(OptimizerType::kAdagrad);
  std::vector<std::vector<FeatureId>> batches;
  for (uint64_t b = 0; b < 256; ++b) {
    batches.push_back(RandomKeys(static_cast<size_t>(state.range(0)), b + 2));
  }
  std::vector<float> out(batches[0].size() * kDim);
  size_t next = 0;
  for (auto _ : state) {
    table.Lookup(batches[next++ % batches.size()], out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() * state.range(0) * kDim * 4);
}
BENCHMARK(BM_LookupUncached)->Arg(1000)->Arg(8192);

void BM_ApplyGradients(benchmark::State& state) {
  const auto optimizer = static_cast<OptimizerType>(state.range(0));
  EmbeddingTable& table = FilledTable(optimizer);
  const std::vector<FeatureId> keys = RandomKeys(8192, 2);
  std::vector<float> gradients(keys.size() * kDim, 1e-4f);
  for (auto _ : state) {
    table.ApplyGradients(keys, gradients.data(), false, nullptr);
  }
  state.SetItemsProcessed(state.iterations() * keys.size());
  state.SetLabel(std::string(OptimizerName(optimizer)));
}
BENCHMARK(BM_ApplyGradients)
    ->Arg(static_cast<int>(OptimizerType::kSgd))
    ->Arg(static_cast<int>(OptimizerType::kAdagrad))
    ->Arg(static_cast<int>(OptimizerType::kAdam))
    ->Arg(static_cast<int>(OptimizerType::kFtrl));

// Adagrad pushes as a shard sees them: each batch updates other rows.
// Argument 1: the rows are tracked as dirty, as with periodic durability;
// 2: and taken (as a periodic flush does, without the write) after every
// 64 batches, the take's time counted in.
void BM_ApplyGradientsUncached(benchmark::State& state) {
  const bool track_dirty = state.range(0) != 0;
  const bool take = state.range(0) == 2;
  EmbeddingTable& table = FilledTable(OptimizerType::kAdagrad);
  std::vector<std::vector<FeatureId>> batches;
  for (uint64_t b = 0; b < 256; ++b) {
    batches.push_back(RandomKeys(8192, b + 1000));
  }
  std::vector<float> gradients(8192 * kDim, 1e-4f);
  size_t next = 0;
  for (auto _ : state) {
    table.ApplyGradients(batches[next++ % batches.size()], gradients.data(),
                         track_dirty, nullptr);
    if (take && next % 64 == 0) {
      size_t rows = 0;
      table.TakeDirtyRows(
          [&](FeatureId, const float*, const float*) { ++rows; });
      benchmark::DoNotOptimize(rows);
    }
  }
  // Later arguments start with nothing left dirty.
  if (track_dirty) {
    table.TakeDirtyRows([](FeatureId, const float*, const float*) {});
  }
  state.SetItemsProcessed(state.iterations() * 8192);
  state.SetLabel(take          ? "dirty rows tracked and taken"
                 : track_dirty ? "dirty rows tracked"
                               : "");
}
BENCHMARK(BM_ApplyGradientsUncached)->Arg(0)->Arg(1)->Arg(2);

// New rows' initial values (a pull of an unseen key, a push creating one),
// dimension 16: truncated normal (0) or uniform (1).
void BM_InitializerFill(benchmark::State& state) {
  InitializerConfig config;
  config.type = state.range(0) == 0 ? InitializerType::kTruncatedNormal
                                    : InitializerType::kUniform;
  config.stddev = 0.01f;
  config.min = -0.05f;
  config.max = 0.05f;
  const Initializer initializer(config, /*seed=*/7);
  constexpr uint32_t kRowDim = 16;
  float row[kRowDim];
  FeatureId key = 0;
  for (auto _ : state) {
    initializer.Fill(++key, kRowDim, row);
    benchmark::DoNotOptimize(row);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) == 0 ? "truncated normal" : "uniform");
}
BENCHMARK(BM_InitializerFill)->Arg(0)->Arg(1);

void BM_FloatsToHalves(benchmark::State& state) {
  std::vector<float> in(8192 * kDim, 0.123f);
  std::vector<uint16_t> out(in.size());
  for (auto _ : state) {
    FloatsToHalves(in.data(), in.size(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * in.size());
}
BENCHMARK(BM_FloatsToHalves);

// Encode a pull answer of 8192 rows into one buffer and decode it again.
void BM_PullWireRoundTrip(benchmark::State& state) {
  const size_t bytes = 8192 * kDim * sizeof(float);
  std::vector<float> rows(8192 * kDim, 0.5f);
  std::vector<float> decoded(rows.size());
  for (auto _ : state) {
    const size_t sizes[] = {bytes};
    PullResponseWriter writer(sizes, /*fp16=*/false);
    std::memcpy(writer.batch_values(0), rows.data(), bytes);
    grpc::ByteBuffer buffer = writer.Finish();
    PullResponseReader reader(buffer);
    size_t got = 0;
    bool fp16 = false;
    if (!reader.NextBatch(&got, &fp16).ok() ||
        !reader.ReadValues(decoded.data(), got).ok()) {
      state.SkipWithError("decode failed");
    }
    benchmark::DoNotOptimize(decoded.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_PullWireRoundTrip);

// The serving PS's row cache answering lookups of arg(0) uniform keys that
// all hit, from arg(1) cached rows of kDim (twice as many slots, so that
// none was evicted while it filled). With 1M rows (256 MB) the rows are in
// memory, not in the CPU's caches, as in strata-serving; 512 batches keep
// the lookups from warming them.
void BM_RowCacheHits(benchmark::State& state) {
  constexpr TableId kTable = 1;
  const uint64_t cached = static_cast<uint64_t>(state.range(1));
  static std::map<uint64_t, serving_internal::RowCache*> caches;
  serving_internal::RowCache*& cache = caches[cached];
  if (cache == nullptr) {
    auto* filled = new serving_internal::RowCache(2 * cached);
    std::vector<float> row(kDim);
    std::vector<size_t> misses;
    std::vector<uint64_t> tickets;
    for (uint64_t key = 0; key < cached; ++key) {
      misses.clear();
      tickets.clear();
      filled->GetMany(kTable, {&key, 1}, kDim, absl::MakeSpan(row), misses,
                      tickets);
      row.assign(kDim, static_cast<float>(key));
      filled->Offer({kTable, key}, tickets.at(0), row);
    }
    cache = filled;
  }
  const size_t batch = static_cast<size_t>(state.range(0));
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> draw(0, cached - 1);
  std::vector<std::vector<FeatureId>> batches(512);
  for (auto& keys : batches) {
    for (size_t i = 0; i < batch; ++i) keys.push_back(draw(rng));
  }
  std::vector<float> out(batch * kDim);
  std::vector<size_t> misses;
  std::vector<uint64_t> tickets;
  size_t turn = 0;
  for (auto _ : state) {
    misses.clear();
    tickets.clear();
    cache->GetMany(kTable, batches[turn++ % batches.size()], kDim,
                   absl::MakeSpan(out), misses, tickets);
    if (!misses.empty()) state.SkipWithError("a cached row missed");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_RowCacheHits)->Args({1000, 200000})->Args({1000, 1000000});

// The CPU model's dot interaction on the default DLRM's shape: 27 vectors
// (26 fields and the bottom MLP's output) of dimension 16, for a batch of
// 1024 examples. Items are examples.
struct InteractionInputs {
  static constexpr int kCount = 27;
  static constexpr int kInteractionDim = 16;
  static constexpr int kExamples = 1024;
  static constexpr size_t kPairs = kCount * (kCount - 1) / 2;
  // As the model lays a batch out.
  const size_t stride = model_internal::FeatureMajorStride(kExamples);
  InteractionInputs()
      : vectors(kCount * kInteractionDim * stride),
        pair_values(kPairs * stride),
        vector_grads(vectors.size()) {
    std::mt19937 random(7);
    std::uniform_real_distribution<float> value(-1, 1);
    for (float& v : vectors) v = value(random);
    for (float& v : pair_values) v = value(random);
  }
  std::vector<float> vectors;
  std::vector<float> pair_values;  // Dots forward, their gradients backward.
  std::vector<float> vector_grads;
};

// The argument picks a build of the kernels from those this CPU runs
// (0: the one the model uses; see SupportedInteractionKernels).
const model_internal::InteractionKernels* KernelsFor(benchmark::State& state) {
  const auto& builds = model_internal::SupportedInteractionKernels();
  const size_t index = static_cast<size_t>(state.range(0));
  if (index >= builds.size()) {
    state.SkipWithError("this CPU runs fewer builds of the kernels");
    return nullptr;
  }
  state.SetLabel(builds[index].name);
  return &builds[index];
}

void BM_DotInteraction(benchmark::State& state) {
  const model_internal::InteractionKernels* kernels = KernelsFor(state);
  if (kernels == nullptr) return;
  InteractionInputs in;
  for (auto _ : state) {
    kernels->forward(in.vectors.data(), in.kCount, in.kInteractionDim,
                     in.kExamples, in.stride, in.pair_values.data());
    benchmark::DoNotOptimize(in.pair_values.data());
  }
  state.SetItemsProcessed(state.iterations() * in.kExamples);
}
BENCHMARK(BM_DotInteraction)->DenseRange(0, 2);

void BM_DotInteractionBackward(benchmark::State& state) {
  const model_internal::InteractionKernels* kernels = KernelsFor(state);
  if (kernels == nullptr) return;
  InteractionInputs in;
  for (auto _ : state) {
    kernels->backward(in.vectors.data(), in.pair_values.data(), in.kCount,
                      in.kInteractionDim, in.kExamples, in.stride,
                      in.vector_grads.data());
    benchmark::DoNotOptimize(in.vector_grads.data());
  }
  state.SetItemsProcessed(state.iterations() * in.kExamples);
}
BENCHMARK(BM_DotInteractionBackward)->DenseRange(0, 2);

// One training step of the CPU model (forward and backward) on the bench's
// DLRM (the default ModelConfig) for a single-hot batch of 1024 examples
// whose 26,624 slots draw from 16,384 pulled rows. Items are examples. Run
// it with OPENBLAS_NUM_THREADS=1, as strata-worker runs OpenBLAS: otherwise
// the GEMMs spread over the cores and the BLAS threads' spinning counts in.
void BM_CpuModelStep(benchmark::State& state) {
  const ModelConfig config;
  auto model = CreateCpuDenseModel(config);
  if (!model.ok() ||
      !(*model)->SetParameters(InitialDenseParameters(config)).ok()) {
    state.SkipWithError("cannot create the model");
    return;
  }
  constexpr int kExamples = 1024;
  constexpr int kRowsPulled = 16384;
  std::mt19937 random(11);
  std::uniform_real_distribution<float> value(-0.05f, 0.05f);
  std::vector<float> dense(kExamples * config.num_dense), labels(kExamples);
  std::vector<float> embeddings(kRowsPulled * config.embedding_dim);
  for (float& v : dense) v = value(random) + 0.05f;
  for (float& v : labels) v = static_cast<float>(random() % 2);
  for (float& v : embeddings) v = value(random);
  std::vector<uint32_t> offsets, rows;
  for (int slot = 0; slot < kExamples * config.num_fields; ++slot) {
    offsets.push_back(static_cast<uint32_t>(rows.size()));
    rows.push_back(random() % kRowsPulled);
  }
  offsets.push_back(static_cast<uint32_t>(rows.size()));
  ModelBatch batch;
  batch.batch_size = kExamples;
  batch.dense = dense;
  batch.labels = labels;
  batch.offsets = offsets;
  batch.rows = rows;
  batch.embeddings = embeddings;
  batch.num_rows = kRowsPulled;
  std::vector<float> dense_gradients(InitialDenseParameters(config).size());
  std::vector<float> row_gradients(embeddings.size());
  std::vector<float> probabilities(kExamples);
  for (auto _ : state) {
    auto loss = (*model)->ForwardBackward(
        batch, absl::MakeSpan(dense_gradients), absl::MakeSpan(row_gradients),
        absl::MakeSpan(probabilities));
    if (!loss.ok()) {
      state.SkipWithError("the step failed");
      return;
    }
    benchmark::DoNotOptimize(row_gradients.data());
  }
  state.SetItemsProcessed(state.iterations() * kExamples);
}
BENCHMARK(BM_CpuModelStep);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
