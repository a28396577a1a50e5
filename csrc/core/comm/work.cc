#include "comm/work.h"

#include "util/error.h"

namespace mccl {

void Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout.count() > 0) {
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
      throwError(ErrorKind::kTimeout, description_, ": not complete after waiting ",
                 timeout.count(), " ms");
    }
  } else {
    cv_.wait(lock, [&] { return done_; });
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::isCompleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

int Work::sourceRank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sourceRank_;
}

void Work::setSourceRank(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  sourceRank_ = rank;
}

void Work::onComplete(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void Work::complete(std::exception_ptr error) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_) return;
    finishing_ = true;
    error_ = error;
    callbacks.swap(callbacks_);
  }
  // Callbacks run before waiters wake, so whatever they publish (a torch
  // Future's value) is visible once wait() returns.
  for (auto& fn : callbacks) fn();
  std::vector<std::function<void()>> late;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    late.swap(callbacks_);
  }
  for (auto& fn : late) fn();
  cv_.notify_all();
}

}  // namespace mccl
