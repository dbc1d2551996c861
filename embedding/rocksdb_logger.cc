#include "embedding/rocksdb_logger.h"

#include <cstdarg>
#include <cstdio>
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
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      STRATA_LOG(ERROR, "rocksdb") << line;
    } else {
      STRATA_LOG(WARNING, "rocksdb") << line;
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
