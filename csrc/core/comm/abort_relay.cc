#include "comm/abort_relay.h"

#include "util/thread_name.h"

namespace mccl {

AbortRelay::~AbortRelay() { finish(Deadline(Clock::now())); }

void AbortRelay::start(std::vector<int> order, std::chrono::milliseconds dial, Reach reach) {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stop_ || order.empty()) return;
  started_ = running_ = true;
  thread_ = std::thread([this, order = std::move(order), dial, reach = std::move(reach)]() mutable {
    nameThisThread("mccl-relay");
    run(std::move(order), dial, std::move(reach));
  });
}

void AbortRelay::run(std::vector<int> order, std::chrono::milliseconds dial, Reach reach) {
  for (int rank : order) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
      tried_.push_back(rank);
    }
    bool reached = false;
    try {
      reached = reach(rank, Deadline::after(dial));
    } catch (...) {  // a rank that cannot be dialled is passed over
    }
    if (reached) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  cv_.notify_all();
}

void AbortRelay::finish(Deadline grace) {
  std::thread t;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!grace.isNever()) {
      cv_.wait_until(lock, grace.time(), [this] { return !running_; });
    } else {
      cv_.wait(lock, [this] { return !running_; });
    }
    stop_ = true;
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

std::vector<int> AbortRelay::tried() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tried_;
}

}  // namespace mccl
