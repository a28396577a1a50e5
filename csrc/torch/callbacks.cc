#include "callbacks.h"

#include <Python.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__APPLE__)
#include <mach/mach.h>
#elif defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "util/logging.h"
#include "util/params.h"
#include "util/thread_name.h"

namespace mccl::torch_adapter {

namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How long the issuing thread must stay parked before the callback thread
// marks its Futures.
constexpr int64_t kParkedNs = 1'000'000;

// What the kernel says of a thread: whether it is running (or runnable) and
// the CPU time it has used. False when the thread is gone.
struct ThreadProbe {
#if defined(__APPLE__)
  mach_port_t port = pthread_mach_thread_np(pthread_self());
  bool sample(bool* running, int64_t* cpuNs) const {
    thread_basic_info_data_t info;
    mach_msg_type_number_t count = THREAD_BASIC_INFO_COUNT;
    if (thread_info(port, THREAD_BASIC_INFO, reinterpret_cast<thread_info_t>(&info), &count) !=
        KERN_SUCCESS) {
      return false;
    }
    *running = info.run_state == TH_STATE_RUNNING;
    *cpuNs = (static_cast<int64_t>(info.user_time.seconds) + info.system_time.seconds) * 1'000'000'000 +
             (static_cast<int64_t>(info.user_time.microseconds) + info.system_time.microseconds) * 1'000;
    return true;
  }
#elif defined(__linux__)
  pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  clockid_t clock = [] {
    clockid_t c;
    return pthread_getcpuclockid(pthread_self(), &c) == 0 ? c : CLOCK_THREAD_CPUTIME_ID;
  }();
  bool sample(bool* running, int64_t* cpuNs) const {
    if (clock == CLOCK_THREAD_CPUTIME_ID) return false;  // no clock for it: treat as gone
    timespec ts{};
    if (clock_gettime(clock, &ts) != 0) return false;
    *cpuNs = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return false;
    char buf[512];
    size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "tid (comm) S ...": the state follows the last ')' (comm may hold one).
    const char* close = nullptr;
    for (const char* p = buf; *p != '\0'; ++p) {
      if (*p == ')') close = p;
    }
    if (close == nullptr || close[1] == '\0' || close[2] == '\0') return false;
    *running = close[2] == 'R';
    return true;
  }
#else
  bool sample(bool* running, int64_t* cpuNs) const {
    *running = true;  // unknown: never taken for parked (the deadline applies)
    *cpuNs = 0;
    return true;
  }
#endif
};

}  // namespace

class Issuer {
 public:
  // Callback thread only: whether this thread has been parked for
  // kParkedNs (or is gone).
  bool parked(int64_t now) {
    bool running = false;
    int64_t cpu = 0;
    if (!probe_.sample(&running, &cpu)) return true;
    if (running || cpu != lastCpu_ || stillSince_ == 0) {
      lastCpu_ = cpu;
      stillSince_ = running ? 0 : now;
      return false;
    }
    return now - stillSince_ >= kParkedNs;
  }
  bool isThisThread() const { return self_ == std::this_thread::get_id(); }

 private:
  ThreadProbe probe_;
  std::thread::id self_ = std::this_thread::get_id();
  int64_t lastCpu_ = -1;
  int64_t stillSince_ = 0;
};

namespace {

thread_local bool tIsCallbackThread = false;
// Marks not yet run: MCCL entry points look no further while it is zero.
std::atomic<int64_t> gLive{0};

struct Counts {
  std::atomic<int64_t> onIssuer{0}, onWaiter{0}, whileParked{0}, atDeadline{0};
};
Counts& counts() {
  static auto* c = new Counts();
  return *c;
}

class Registry {
 public:
  void add(std::shared_ptr<PendingMark> m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) {
      started_ = true;
      // Lives as long as the process (the Registry is never destroyed).
      std::thread([this] {
        nameThisThread("mccl-callbacks");
        tIsCallbackThread = true;
        loop();
      }).detach();
    }
    marks_.push_back(std::move(m));
    cv_.notify_all();
  }

  // The pending marks, oldest first, pruned of those that ran.
  std::vector<std::shared_ptr<PendingMark>> snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    prune();
    return marks_;
  }

  int64_t pending() {
    std::lock_guard<std::mutex> lock(mu_);
    prune();
    return static_cast<int64_t>(marks_.size());
  }

 private:
  void prune() {
    marks_.erase(std::remove_if(marks_.begin(), marks_.end(), [](const auto& m) { return m->done(); }),
                 marks_.end());
  }

  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        prune();
        cv_.wait(lock, [&] { return !marks_.empty(); });
      }
      int64_t deadlineMs = params::spec::callbackDeadlineMs.def;
      try {
        deadlineMs = params::callbackDeadlineMs();
      } catch (const std::exception&) {
        // Refused with its reason when the group was made; changed since.
      }
      for (const auto& m : snapshot()) {
        if (m->done()) continue;
        if (m->issuer()->parked(nowNs())) {
          m->runHere(MarkedOn::kParked);
        } else if (deadlineMs > 0 && m->ageMs() >= deadlineMs) {
          static std::once_flag warned;
          std::call_once(warned, [&] {
            MCCL_LOG(kWarn, "an MPS op's Future callbacks ran on MCCL's callback thread after ",
                     deadlineMs, " ms (MCCL_CALLBACK_DEADLINE_MS): the thread that issued the op "
                     "neither called MCCL nor blocked meanwhile; if it was using MPS at that moment, "
                     "two threads used MPS at once. Wait for ops with Work.wait() or call MCCL again.");
          });
          m->runHere(MarkedOn::kDeadline);
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PendingMark>> marks_;
  bool started_ = false;
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: its thread may outlive main
  return *r;
}

}  // namespace

std::shared_ptr<Issuer> thisThreadIssuer() {
  thread_local std::shared_ptr<Issuer> issuer = std::make_shared<Issuer>();
  return issuer;
}

PendingMark::PendingMark(std::shared_ptr<Issuer> issuer, std::function<void()> mark)
    : issuer_(std::move(issuer)), mark_(std::move(mark)), since_(nowNs()) {}

void PendingMark::runHere(MarkedOn where) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kDone || runner_ == std::this_thread::get_id()) return;  // (a callback of its own)
  if (state_ == State::kRunning) {
    // Another thread runs it. Its callbacks may want the GIL: never wait
    // for them holding it.
    lock.unlock();
    PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    lock.lock();
    cv_.wait(lock, [&] { return state_ == State::kDone; });
    lock.unlock();
    if (saved != nullptr) PyEval_RestoreThread(saved);
    return;
  }
  state_ = State::kRunning;
  runner_ = std::this_thread::get_id();
  auto mark = std::move(mark_);
  lock.unlock();
  auto& c = counts();
  (where == MarkedOn::kIssuer     ? c.onIssuer
   : where == MarkedOn::kWaiter   ? c.onWaiter
   : where == MarkedOn::kParked   ? c.whileParked
                                  : c.atDeadline)
      .fetch_add(1);
  mark();  // marks the Future: its callbacks catch their own errors
  mark = nullptr;
  lock.lock();
  state_ = State::kDone;
  gLive.fetch_sub(1);
  cv_.notify_all();
}

bool PendingMark::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kPending;
}

bool PendingMark::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kDone;
}

int64_t PendingMark::ageMs() const { return (nowNs() - since_) / 1'000'000; }

std::shared_ptr<PendingMark> deferMark(std::shared_ptr<Issuer> issuer, std::function<void()> mark) {
  auto m = std::make_shared<PendingMark>(std::move(issuer), std::move(mark));
  gLive.fetch_add(1);
  registry().add(m);
  return m;
}

void runMarksOfThisThread() {
  if (tIsCallbackThread || gLive.load() == 0) return;  // (a callback calling MCCL: the loop goes on)
  for (const auto& m : registry().snapshot()) {
    // Only marks nobody runs yet: one that runs (on the callback thread, or
    // further up this thread's stack) goes on there.
    if (m->pending() && m->issuer()->isThisThread()) m->runHere(MarkedOn::kIssuer);
  }
}

MarkCounts markCounts() {
  auto& c = counts();
  MarkCounts out;
  out.onIssuer = c.onIssuer.load();
  out.onWaiter = c.onWaiter.load();
  out.whileParked = c.whileParked.load();
  out.atDeadline = c.atDeadline.load();
  out.pending = registry().pending();
  return out;
}

bool onCallbackThread() { return tIsCallbackThread; }

}  // namespace mccl::torch_adapter
