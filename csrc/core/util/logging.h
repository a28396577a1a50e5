// Minimal leveled logging to stderr, controlled by MCCL_LOG_LEVEL.
//
// Thread-safe: each line is written with a single write(2). Messages that
// may repeat without bound (for example, a port scanner knocking on the
// listener) go through RateLimiter so the log stays readable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "util/error.h"

namespace mccl {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// The level from MCCL_LOG_LEVEL (ERROR, WARN, INFO, DEBUG, TRACE), read once.
LogLevel logLevel();
// Parses ERROR, WARN, INFO, DEBUG or TRACE (any case; empty: WARN); false
// for anything else.
bool parseLogLevel(const std::string& text, LogLevel* out);
bool logEnabled(LogLevel level);
void logLine(LogLevel level, const std::string& message);

#define MCCL_LOG(level, ...)                                              \
  do {                                                                    \
    if (::mccl::logEnabled(::mccl::LogLevel::level)) {                    \
      ::mccl::logLine(::mccl::LogLevel::level, ::mccl::strCat(__VA_ARGS__)); \
    }                                                                     \
  } while (0)

// Allows at most `burst` events per `period`; counts what it suppressed so the
// next allowed line can say how many were dropped.
class RateLimiter {
 public:
  RateLimiter(int burst, std::chrono::milliseconds period)
      : burst_(burst), period_(period) {}
  // Returns true if the caller may log now; *suppressed receives the number
  // of events dropped since the last allowed one.
  bool allow(uint64_t* suppressed);

 private:
  std::mutex mu_;
  const int burst_;
  const std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point windowStart_{};
  int used_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace mccl
