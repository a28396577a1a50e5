// A FIFO thread that hands ops to the core once their device inputs are
// staged. Ops of one group must reach the core in call order, so while any
// op waits here, later ones (device or not) queue behind it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "util/thread_priority.h"

namespace mccl::torch_adapter {

class SubmitQueue {
 public:
  SubmitQueue() = default;
  ~SubmitQueue() { stop(); }
  SubmitQueue(const SubmitQueue&) = delete;
  SubmitQueue& operator=(const SubmitQueue&) = delete;

  // Whether an op must queue (something is queued or being submitted).
  bool busy() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_ > 0;
  }

  // Queues `job`; the thread starts on first use. Jobs run one at a time, in order.
  void push(std::function<void()> job) {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) {
      // Shut down: run it here (the core refuses it at once).
      lock.unlock();
      job();
      return;
    }
    if (!thread_.joinable() && !stopping_) {
      thread_ = std::thread([this] {
        nameDataPathThread("mccl-submit");
        loop();
      });
    }
    jobs_.push_back(std::move(job));
    ++pending_;
    cv_.notify_all();
  }

  // Runs what is queued, then joins the thread.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, all done
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();  // jobs catch their own errors
      lock.lock();
      --pending_;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  int pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace mccl::torch_adapter
