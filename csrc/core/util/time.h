// Deadlines on the monotonic clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace mccl {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  static Deadline after(std::chrono::milliseconds d) {
    if (d.count() <= 0 || d > std::chrono::hours(24 * 365)) return never();
    return Deadline(Clock::now() + d);
  }
  explicit Deadline(Clock::time_point t) : t_(t) {}

  Clock::time_point time() const { return t_; }
  bool isNever() const { return t_ == Clock::time_point::max(); }
  bool expired() const { return !isNever() && Clock::now() >= t_; }
  // Milliseconds left, clamped to [0, INT32_MAX]; -1 means "no deadline" (poll's convention).
  int pollTimeoutMs() const {
    if (isNever()) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t_ - Clock::now()).count();
    if (left <= 0) return 0;
    return left > INT32_MAX ? INT32_MAX : static_cast<int>(left) + 1;
  }
  Deadline earlier(const Deadline& o) const { return o.t_ < t_ ? o : *this; }

 private:
  Clock::time_point t_;
};

inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace mccl
