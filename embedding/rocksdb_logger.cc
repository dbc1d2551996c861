#include "embedding/rocksdb_logger.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/logging.h"
#include "rocksdb/env.h"

namespace strata {
namespace {

class StrataLogger final : public rocksdb::Logger {
 public:
  StrataLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format,
            va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char line[1024];
    const int length = std::vsnprintf(line, sizeof(line), format, ap);
    if (length < 0) return;
    // One level down: the store reports the failures that matter itself,
    // with what they mean for pushes (RESOURCE_EXHAUSTED, read-only, ...);
    // RocksDB's own lines are the detail. A new database's directory is
    // "not found" (an error to RocksDB) just before it is created.
    const bool new_database = std::strstr(line, "dir NotFound") != nullptr;
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL && !new_database) {
      STRATA_LOG(WARNING, "rocksdb") << line;
    } else {
      STRATA_LOG(INFO, "rocksdb") << line;
    }
  }
};

}  // namespace

std::shared_ptr<rocksdb::Logger> RocksDbLogger() {
  // One for the process: it holds no state of a database.
  static const std::shared_ptr<rocksdb::Logger> logger =
      std::make_shared<StrataLogger>();
  return logger;
}

}  // namespace strata
