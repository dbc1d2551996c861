// libFuzzer target: the push log's replay (embedding/internal/push_log.h),
// which reads what a killed process left on disk. The input is one segment
// file, in an in-memory Env. Every input replays or fails with DATA_LOSS;
// the records it yields, appended to a new log, replay to the same records.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "embedding/internal/push_log.h"
#include "rocksdb/env.h"

namespace {

using strata::embedding_internal::PushLog;
using strata::embedding_internal::PushLogRecord;
using strata::embedding_internal::PushLogRows;

// A record with its rows copied out of the replay's buffer.
struct Copied {
  PushLogRecord record;
  std::vector<std::vector<uint64_t>> keys;
  std::vector<std::vector<float>> rows;
};

absl::Status ReplayAll(rocksdb::Env* env, const std::string& dir,
                       std::vector<Copied>* out) {
  return PushLog::Replay(env, dir, [&](const PushLogRecord& record) {
    Copied copy;
    copy.record = record;
    for (PushLogRows& table : copy.record.tables) {
      const size_t floats =
          table.keys.size() * (size_t{table.dim} + table.state_dim);
      copy.keys.emplace_back(table.keys.begin(), table.keys.end());
      copy.rows.emplace_back(table.rows, table.rows + floats);
    }
    for (size_t t = 0; t < copy.record.tables.size(); ++t) {
      copy.record.tables[t].keys = copy.keys[t];
      copy.record.tables[t].rows = copy.rows[t].data();
    }
    out->push_back(std::move(copy));
    return absl::OkStatus();
  });
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<rocksdb::Env> env(
      rocksdb::NewMemEnv(rocksdb::Env::Default()));
  const std::string dir = "/fuzz/push_log";
  if (!env->CreateDirIfMissing("/fuzz").ok() ||
      !env->CreateDirIfMissing(dir).ok()) {
    __builtin_trap();
  }
  {
    std::unique_ptr<rocksdb::WritableFile> file;
    if (!env->NewWritableFile(dir + "/segment-00000000000000000001.log", &file,
                              rocksdb::EnvOptions())
             .ok() ||
        !file->Append(rocksdb::Slice(reinterpret_cast<const char*>(data), size))
             .ok() ||
        !file->Close().ok()) {
      __builtin_trap();
    }
  }
  std::vector<Copied> first;
  absl::Status replayed = ReplayAll(env.get(), dir, &first);
  if (!replayed.ok()) {
    if (!absl::IsDataLoss(replayed)) __builtin_trap();
    return 0;
  }
  const std::string again = "/fuzz/again";
  PushLog log(env.get(), again);
  if (!log.Start().ok()) __builtin_trap();
  for (const Copied& copy : first) {
    if (!log.Append(copy.record).ok()) __builtin_trap();
  }
  std::vector<Copied> second;
  if (!ReplayAll(env.get(), again, &second).ok()) __builtin_trap();
  if (second.size() != first.size()) __builtin_trap();
  for (size_t i = 0; i < first.size(); ++i) {
    const PushLogRecord& a = first[i].record;
    const PushLogRecord& b = second[i].record;
    if (a.client_id != b.client_id || a.client_sequence != b.client_sequence ||
        a.replication != b.replication || a.tables.size() != b.tables.size() ||
        first[i].keys != second[i].keys) {
      __builtin_trap();
    }
    for (size_t t = 0; t < a.tables.size(); ++t) {
      if (a.tables[t].table != b.tables[t].table ||
          a.tables[t].dim != b.tables[t].dim ||
          a.tables[t].state_dim != b.tables[t].state_dim ||
          !SameBits(first[i].rows[t], second[i].rows[t])) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
