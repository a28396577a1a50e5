// Work: the handle a caller gets for an operation submitted to a
// communicator (collective or point-to-point).
//
// Completion happens on an MCCL thread: the one that finished the op's last
// transfer (usually a connection's receive or send thread), the engine
// thread, or for point-to-point the connection or watchdog thread. Callbacks registered with onComplete() run on that
// thread, once, after the result is final; they must be short and must not
// wait for other MCCL operations. wait() may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace mccl {

class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}

  // Blocks until the operation completes and rethrows its error. With a
  // positive timeout, throws mccl::Error(kTimeout) if it is not complete by
  // then (the operation itself goes on).
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  bool isCompleted() const;
  // Null on success or while pending.
  std::exception_ptr exception() const;
  // For a receive from any source: the rank the message came from, else -1.
  int sourceRank() const;
  const std::string& description() const { return description_; }

  // Runs `fn` once when the op completes (at once, on this thread, if it
  // already has).
  void onComplete(std::function<void()> fn);

  // Completion, by the communicator. Idempotent: the first call wins.
  void complete(std::exception_ptr error);
  void setSourceRank(int rank);

 private:
  const std::string description_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool finishing_ = false;  // complete() has begun
  bool done_ = false;       // callbacks have run
  std::exception_ptr error_;
  int sourceRank_ = -1;
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace mccl
