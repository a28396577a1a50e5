#include "device/completer.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "util/thread_priority.h"

namespace mccl::torch_adapter {
namespace {

thread_local bool tIsCompleter = false;

class Completer {
 public:
  void push(EventPtr ready, std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      started_ = true;
      // Lives as long as the process (the Completer is never destroyed).
      std::thread([this] {
        nameDataPathThread("mccl-complete");
        tIsCompleter = true;
        loop();
      }).detach();
    }
    jobs_.emplace_back(std::move(ready), std::move(job));
    cv_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !jobs_.empty(); });
      auto [ready, job] = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      // Poll with backoff: a copy of a few KiB ends in microseconds, one of
      // hundreds of MiB in tens of milliseconds.
      auto pause = std::chrono::microseconds(2);
      while (ready && !ready->done()) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(100));
      }
      job();  // jobs catch their own errors
      job = nullptr;  // release what it holds before sleeping
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<EventPtr, std::function<void()>>> jobs_;
  bool started_ = false;
};

Completer& completer() {
  static auto* c = new Completer();  // never destroyed: its thread may outlive main
  return *c;
}

}  // namespace

void completeWhen(EventPtr ready, std::function<void()> job) {
  completer().push(std::move(ready), std::move(job));
}

bool onCompletionThread() { return tIsCompleter; }

}  // namespace mccl::torch_adapter
