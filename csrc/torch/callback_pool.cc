#include "callback_pool.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "util/logging.h"
#include "util/thread_name.h"

namespace mccl::torch_adapter {
namespace {

constexpr int kMaxThreads = 64;
thread_local bool tIsCallbackThread = false;

class CallbackPool {
 public:
  void post(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    // Every queued job has a waiting thread of its own: a callback that
    // blocks for a later op must not hold up that op's mark.
    if (waiting_ < jobs_.size()) {
      if (threads_ < kMaxThreads) {
        try {
          std::thread([this] {
            nameThisThread("mccl-then");
            tIsCallbackThread = true;
            loop();
          }).detach();  // lives as long as the process (the pool is never destroyed)
          ++threads_;
          ++waiting_;  // counted as waiting from the start: it takes a job first thing
        } catch (const std::exception& e) {
          warnOnce(e.what());
        }
      } else {
        warnOnce("all callback threads are busy");
      }
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !jobs_.empty(); });
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      --waiting_;
      lock.unlock();
      job();  // marks catch their own errors
      job = nullptr;  // release what it holds before waiting
      lock.lock();
      ++waiting_;
    }
  }

  void warnOnce(const std::string& why) {  // under mu_
    if (warned_) return;
    warned_ = true;
    MCCL_LOG(kWarn, "mccl: Future callbacks wait for a thread (", why, "; ", threads_,
             " threads run callbacks that have not returned)");
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t waiting_ = 0;
  int threads_ = 0;
  bool warned_ = false;
};

CallbackPool& pool() {
  static auto* p = new CallbackPool();  // never destroyed: its threads may outlive main
  return *p;
}

}  // namespace

void runOnCallbackThread(std::function<void()> mark) { pool().post(std::move(mark)); }

bool onCallbackPoolThread() { return tIsCallbackThread; }

}  // namespace mccl::torch_adapter
