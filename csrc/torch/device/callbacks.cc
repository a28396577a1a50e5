#include "device/callbacks.h"

#include <Python.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "device/thread_census.h"
#include "util/logging.h"
#include "util/params.h"
#include "util/thread_name.h"

namespace mccl::torch_adapter {

class Issuer {};

namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How long every other thread must stay still before a runner marks a Future.
constexpr int64_t kStillNs = 1'000'000;
// Runner threads at most (each one busy is a callback waiting for another
// op: PowerSGD holds one per bucket in flight).
constexpr size_t kMaxRunners = 64;

// Runner threads' stack: callbacks nest on it (a callback that waits for an
// op may run that op's callbacks further up) and run Python; macOS gives a
// std::thread 512 KiB, Linux RLIMIT_STACK.
constexpr size_t kRunnerStackBytes = size_t{8} << 20;

// Starts `body` on a detached thread with kRunnerStackBytes of stack.
void startRunnerThread(std::function<void()> body) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kRunnerStackBytes);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  auto* fn = new std::function<void()>(std::move(body));
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
        (*f)();
        return nullptr;
      },
      fn);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete fn;
    throw std::system_error(rc, std::generic_category(), "starting an MCCL callback runner thread");
  }
}

thread_local bool tIsRunner = false;
// A runner inside a callback (not between marks).
thread_local bool tInCallback = false;
// Runners inside a callback and not waiting for an op (WaitingInCallback).
std::atomic<int64_t> gActiveCallbacks{0};
// Inside a callback a runner runs: the issuer of that callback's op.
thread_local std::shared_ptr<Issuer> tRunningFor;
// Marks not yet run: MCCL entry points look no further while it is zero.
std::atomic<int64_t> gLive{0};
std::atomic<int64_t> gDeadlineMs{params::spec::callbackDeadlineMs.def};

struct Counts {
  std::atomic<int64_t> onIssuer{0}, onWaiter{0}, whileQuiet{0}, atDeadline{0};
};
Counts& counts() {
  static auto* c = new Counts();
  return *c;
}

// Runner threads: each takes one mark at a time. A runner whose callback
// waits (for an op it issued) leaves the next mark to another runner.
class Runners {
 public:
  void run(std::shared_ptr<PendingMark> m, MarkedOn where) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(m), where);
    if (idle_ == 0 && threads_ < kMaxRunners) {
      ++threads_;
      startRunnerThread([this] { loop(); });  // lives as long as the process
    } else if (idle_ == 0) {
      static std::once_flag warned;
      std::call_once(warned, [] {
        MCCL_LOG(kWarn, "all ", kMaxRunners, " MCCL callback runner threads are busy (callbacks waiting for "
                 "other ops); further MPS Future callbacks wait for one to finish");
      });
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    nameThisThread("mccl-cb-run");
    tIsRunner = true;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return !queue_.empty(); });
      --idle_;
      auto [m, where] = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      tRunningFor = m->issuer();
      tInCallback = true;
      gActiveCallbacks.fetch_add(1);
      m->tryRun(where);
      gActiveCallbacks.fetch_sub(1);
      tInCallback = false;
      tRunningFor = nullptr;
      m = nullptr;
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<PendingMark>, MarkedOn>> queue_;
  size_t idle_ = 0, threads_ = 0;
};

class Registry {
 public:
  void add(std::shared_ptr<PendingMark> m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      started_ = true;
      // Lives as long as the process (the Registry is never destroyed).
      std::thread([this] {
        nameThisThread("mccl-callbacks");
        loop();
      }).detach();
    }
    marks_.push_back(std::move(m));
    cv_.notify_all();
  }

  // The marks nobody has taken, oldest first (pruned of the others).
  std::vector<std::shared_ptr<PendingMark>> pending() {
    std::lock_guard<std::mutex> lock(mu_);
    marks_.erase(std::remove_if(marks_.begin(), marks_.end(), [](const auto& m) { return !m->pending(); }),
                 marks_.end());
    return marks_;
  }

 private:
  // One mark per quiet spell: after handing one over, the runner's own work
  // (or the thread it wakes) must come to rest before the next.
  void loop() {
    QuietWatch watch;
    auto pause = std::chrono::microseconds(100);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !marks_.empty(); });
      }
      auto marks = pending();
      if (marks.empty()) {
        watch.reset();
        continue;
      }
      const auto& oldest = marks.front();
      const int64_t deadlineMs = gDeadlineMs.load();
      bool handed = false;
      if (watch.quiet(nowNs(), kStillNs)) {
        runners_.run(oldest, MarkedOn::kQuiet);
        handed = true;
      } else if (deadlineMs > 0 && oldest->ageMs() >= deadlineMs && gActiveCallbacks.load() == 0) {
        // (Not while a runner computes a callback: never two at once.)
        static std::once_flag warned;
        std::call_once(warned, [&] {
          MCCL_LOG(kWarn, "an MPS op's Future callbacks ran on an MCCL runner thread after ", deadlineMs,
                   " ms (MCCL_CALLBACK_DEADLINE_MS): no thread called MCCL or waited for the op, and "
                   "some thread never came to rest meanwhile; if it was using MPS, two threads used MPS "
                   "at once. Wait for ops with Work.wait() or call MCCL again.");
        });
        runners_.run(oldest, MarkedOn::kDeadline);
        handed = true;
      }
      if (handed) {
        // The next mark needs a quiet spell of its own, after this one's
        // runner (and whatever it wakes) has come to rest.
        watch.reset();
        for (int i = 0; i < 2000 && oldest->pending(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(25));
        pause = std::chrono::microseconds(100);
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(500));
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PendingMark>> marks_;
  bool started_ = false;
  Runners runners_;
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: its thread may outlive main
  return *r;
}

std::shared_ptr<Issuer> thisThreadIssuer() {
  thread_local std::shared_ptr<Issuer> issuer = std::make_shared<Issuer>();
  return issuer;
}

}  // namespace

std::shared_ptr<Issuer> currentIssuer() { return tRunningFor ? tRunningFor : thisThreadIssuer(); }

PendingMark::PendingMark(std::shared_ptr<Issuer> issuer, std::function<void()> mark)
    : issuer_(std::move(issuer)), mark_(std::move(mark)), since_(nowNs()) {}

void PendingMark::run(std::unique_lock<std::mutex>& lock, MarkedOn where) {
  state_ = State::kRunning;
  runner_ = std::this_thread::get_id();
  auto mark = std::move(mark_);
  lock.unlock();
  auto& c = counts();
  (where == MarkedOn::kIssuer   ? c.onIssuer
   : where == MarkedOn::kWaiter ? c.onWaiter
   : where == MarkedOn::kQuiet  ? c.whileQuiet
                                : c.atDeadline)
      .fetch_add(1);
  mark();  // marks the Future: its callbacks catch their own errors
  mark = nullptr;
  lock.lock();
  state_ = State::kDone;
  gLive.fetch_sub(1);
  cv_.notify_all();
}

bool PendingMark::tryRun(MarkedOn where) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ != State::kPending) return false;
  run(lock, where);
  return true;
}

bool PendingMark::runOrWait(MarkedOn where, int64_t timeoutMs) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kPending) {
    run(lock, where);
    return true;
  }
  if (state_ == State::kDone || runner_ == std::this_thread::get_id()) return true;
  // Another thread runs it. Its callbacks may want the GIL: never wait for
  // them holding it.
  lock.unlock();
  PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  lock.lock();
  bool done = true;
  auto isDone = [&] { return state_ == State::kDone; };
  WaitingInCallback waiting;
  if (timeoutMs > 0) {
    done = cv_.wait_for(lock, std::chrono::milliseconds(timeoutMs), isDone);
  } else {
    cv_.wait(lock, isDone);
  }
  lock.unlock();
  if (saved != nullptr) PyEval_RestoreThread(saved);
  return done;
}

bool PendingMark::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kDone;
}

bool PendingMark::runningHere() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kRunning && runner_ == std::this_thread::get_id();
}

bool PendingMark::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kPending;
}

int64_t PendingMark::ageMs() const { return (nowNs() - since_) / 1'000'000; }

std::shared_ptr<PendingMark> deferMark(std::shared_ptr<Issuer> issuer, std::function<void()> mark) {
  auto m = std::make_shared<PendingMark>(std::move(issuer), std::move(mark));
  gLive.fetch_add(1);
  registry().add(m);
  return m;
}

void runMarksOfThisThread() {
  if (gLive.load() == 0) return;
  const auto me = currentIssuer();
  for (const auto& m : registry().pending()) {
    // Only marks nobody runs yet: one that runs (on a runner, or further up
    // this thread's stack) goes on there.
    if (m->issuer() == me) m->tryRun(MarkedOn::kIssuer);
  }
}

WaitingInCallback::WaitingInCallback() : counted_(tIsRunner && tInCallback) {
  if (counted_) gActiveCallbacks.fetch_sub(1);
}

WaitingInCallback::~WaitingInCallback() {
  if (counted_) gActiveCallbacks.fetch_add(1);
}

void setCallbackDeadlineMs(int64_t ms) { gDeadlineMs.store(ms); }

MarkCounts markCounts() {
  auto& c = counts();
  MarkCounts out;
  out.onIssuer = c.onIssuer.load();
  out.onWaiter = c.onWaiter.load();
  out.whileQuiet = c.whileQuiet.load();
  out.atDeadline = c.atDeadline.load();
  out.pending = static_cast<int64_t>(registry().pending().size());
  return out;
}

bool onCallbackThread() { return tIsRunner; }

size_t thisThreadStackBytes() {
#if defined(__APPLE__)
  return pthread_get_stacksize_np(pthread_self());
#else
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  size_t bytes = 0;
  pthread_attr_getstacksize(&attr, &bytes);
  pthread_attr_destroy(&attr);
  return bytes;
#endif
}

}  // namespace mccl::torch_adapter
