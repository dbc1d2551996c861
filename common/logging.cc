#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace strata {
namespace {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

}  // namespace

void SetMinLogLevel(LogLevel level) {
  min_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool ParseLogLevel(const char* text, LogLevel* level) {
  for (LogLevel candidate : {LogLevel::kDebug, LogLevel::kInfo,
                             LogLevel::kWarning, LogLevel::kError}) {
    if (strcasecmp(text, LevelName(candidate)) == 0) {
      *level = candidate;
      return true;
    }
  }
  return false;
}

namespace logging_internal {

LogLine::LogLine(LogLevel level, const char* component)
    : level_(level), component_(component) {}

LogLine::~LogLine() {
  if (static_cast<int>(level_) < min_level.load(std::memory_order_relaxed)) {
    return;
  }
  // Log lines use wall time on purpose (logging.cc, like clock.cc, is allowed
  // to read it): they are read by people next to other machines' logs.
  std::string line = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                      absl::UTCTimeZone());
  line += ' ';
  line += LevelName(level_);
  line += ' ';
  line += component_;
  line += "] ";
  line += stream_.str();
  line += '\n';
  // One write call per line keeps lines from different threads whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace logging_internal
}  // namespace strata
