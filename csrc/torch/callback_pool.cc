#include "callback_pool.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "util/logging.h"
#include "util/thread_priority.h"

namespace mccl::torch_adapter {
namespace {

// Past this many threads a warning says so (callbacks that block for later
// ops pile up); more are started anyway: a queued mark would wait forever.
constexpr int kManyThreads = 64;
thread_local bool tIsCallbackThread = false;

class CallbackPool {
 public:
  void post(std::function<void()> job) {
    std::unique_lock<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
    // Every queued job has a waiting thread of its own: a callback that
    // blocks for a later op must not hold up that op's mark.
    if (waiting_ < jobs_.size()) {
      if (threads_ == kManyThreads) warnOnce("many callbacks wait for later operations");
      try {
        std::thread([this] {
          nameDataPathThread("mccl-then");
          tIsCallbackThread = true;
          loop();
        }).detach();  // lives as long as the process (the pool is never destroyed)
        ++threads_;
        ++waiting_;  // counted as waiting from the start: it takes a job first thing
      } catch (const std::exception& e) {
        // No thread: run it here rather than never (this thread may be a
        // network thread; a callback that waits for an op would then wait
        // out that op's timeout, as before the pool).
        warnOnce(e.what());
        auto job = std::move(jobs_.back());
        jobs_.pop_back();
        lock.unlock();
        runJob(job);
        return;
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
      runJob(job);
      job = nullptr;  // release what it holds before waiting
      lock.lock();
      ++waiting_;
    }
  }

  static void runJob(const std::function<void()>& job) {
    try {
      job();
    } catch (const std::exception& e) {  // a mark that failed: say so, keep the thread
      MCCL_LOG(kWarn, "mccl: marking a Future failed: ", e.what());
    } catch (...) {
      MCCL_LOG(kWarn, "mccl: marking a Future failed");
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
