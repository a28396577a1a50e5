#include "comm/abort_relay.h"

#include "util/thread_name.h"

namespace mccl {

AbortRelay::~AbortRelay() { finish(Deadline(Clock::now())); }

void AbortRelay::start(std::vector<int> order, std::chrono::milliseconds dial, Reach reach) {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stop_ || order.empty()) return;
  order_ = std::move(order);
  started_ = busy_ = true;
  try {
    thread_ = std::thread([this, dial, reach = std::move(reach)]() mutable {
      nameThisThread("mccl-relay");
      run(dial, std::move(reach));
    });
  } catch (...) {
    busy_ = false;  // no relay: the ABORT goes over the connections only
  }
}

void AbortRelay::run(std::chrono::milliseconds dial, Reach reach) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && at_ < order_.size()) {
    const int rank = order_[at_];
    busy_ = true;
    bool reached = false;
    if (lost_.count(rank) == 0) {
      tried_.push_back(rank);
      lock.unlock();
      try {
        reached = reach(rank, Deadline::after(dial));
      } catch (...) {  // a rank that cannot be dialled is passed over
      }
      lock.lock();
    }
    if (reached) {
      // Told, unless it turns out to be dead or leaving: wait for that.
      busy_ = false;
      cv_.notify_all();
      cv_.wait(lock, [&] { return stop_ || lost_.count(rank) > 0; });
    }
    ++at_;
  }
  busy_ = false;
  cv_.notify_all();
}

void AbortRelay::lost(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  lost_.insert(rank);
  // Parked at that rank: from now it is dialling again (finish waits for it).
  if (started_ && !stop_ && at_ < order_.size() && order_[at_] == rank) busy_ = true;
  cv_.notify_all();
}

void AbortRelay::finish(Deadline grace) {
  std::thread t;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!grace.isNever()) {
      cv_.wait_until(lock, grace.time(), [this] { return !busy_; });
    } else {
      cv_.wait(lock, [this] { return !busy_; });
    }
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
}

std::vector<int> AbortRelay::tried() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tried_;
}

}  // namespace mccl
