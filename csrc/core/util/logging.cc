#include "util/logging.h"

#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "util/params.h"

namespace mccl {

namespace {

LogLevel parseLevel(const std::string& s) {
  LogLevel level = LogLevel::kWarn;
  parseLogLevel(s, &level);  // validate() refuses a bad value; logging itself falls back to WARN
  return level;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
  }
  return "?";
}

}  // namespace

bool parseLogLevel(const std::string& text, LogLevel* out) {
  static const char* names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  if (text.empty()) {
    *out = LogLevel::kWarn;
    return true;
  }
  for (int i = 0; i < 5; ++i) {
    if (text.size() == std::strlen(names[i]) && ::strncasecmp(text.c_str(), names[i], text.size()) == 0) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

LogLevel logLevel() {
  static const LogLevel level = parseLevel(params::logLevel());
  return level;
}

bool logEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(logLevel());
}

void logLine(LogLevel level, const std::string& message) {
  std::string line = strCat("[mccl pid ", ::getpid(), "] ", levelName(level), " ",
                            message, "\n");
  // One write per line keeps lines from different threads intact.
  ssize_t rc = ::write(STDERR_FILENO, line.data(), line.size());
  (void)rc;
}

bool RateLimiter::allow(uint64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (now - windowStart_ >= period_) {
    windowStart_ = now;
    used_ = 0;
  }
  if (used_ < burst_) {
    ++used_;
    *suppressed = dropped_;
    dropped_ = 0;
    return true;
  }
  ++dropped_;
  return false;
}

}  // namespace mccl
