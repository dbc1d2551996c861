#ifndef STRATA_COMMON_LOGGING_H_
#define STRATA_COMMON_LOGGING_H_

#include <sstream>

// One line per event on stderr: "<UTC time> <level> <component>] message".
// Usage: STRATA_LOG(INFO, "server") << "listening on " << address;

namespace strata {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below `level` are dropped. Thread-safe.
void SetMinLogLevel(LogLevel level);
bool ParseLogLevel(const char* text, LogLevel* level);

namespace logging_internal {

class LogLine {
 public:
  LogLine(LogLevel level, const char* component);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* component_;
  std::ostringstream stream_;
};

}  // namespace logging_internal
}  // namespace strata

#define STRATA_LOG(level, component)                                       \
  ::strata::logging_internal::LogLine(STRATA_LOG_LEVEL_##level, component) \
      .stream()

#define STRATA_LOG_LEVEL_DEBUG ::strata::LogLevel::kDebug
#define STRATA_LOG_LEVEL_INFO ::strata::LogLevel::kInfo
#define STRATA_LOG_LEVEL_WARNING ::strata::LogLevel::kWarning
#define STRATA_LOG_LEVEL_ERROR ::strata::LogLevel::kError

#endif  // STRATA_COMMON_LOGGING_H_
