#include "comm/watchdog.h"

#include "comm/op_context.h"
#include "util/logging.h"
#include "util/thread_name.h"

namespace mccl {

namespace {
constexpr auto kRetireGrace = std::chrono::seconds(1);
}  // namespace

Watchdog::Watchdog(OpHost& host, Engine& engine, std::function<void()> interrupt)
    : host_(host), engine_(engine), interrupt_(std::move(interrupt)) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start() {
  thread_ = std::thread([this] {
    nameThisThread("mccl-watchdog");
    owner_.bindToThisThread();
    loop();
  });
}

void Watchdog::stop() {
  MCCL_ASSERT_OFF(owner_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::watch(Deadline deadline, std::weak_ptr<Transfer> t, std::chrono::milliseconds limit) {
  if (deadline.isNever()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (watched_.size() >= 1024) {
      std::erase_if(watched_, [](const auto& kv) {
        auto x = kv.second.transfer.lock();
        return !x || x->done();
      });
    }
    watched_.emplace(deadline.time(), Watched{std::move(t), limit});
  }
  kick(deadline.time());
}

void Watchdog::kick() { kick(Clock::time_point::min()); }

void Watchdog::kick(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (deadline >= wake_) return;  // it wakes before then and rescans
    ++kicks_;
  }
  cv_.notify_all();
}

Clock::time_point Watchdog::scanOps(Clock::time_point now, Clock::time_point next, bool* rescan) {
  MCCL_ASSERT_ON(owner_);
  // Deadlines of running ops, and ops that failed but still wait for
  // transfers to retire (forced after a grace period).
  bool force = false;
  for (auto& op : engine_.active()) {
    Clock::time_point since;
    if (op->retiring(&since)) {
      if (now - since >= kRetireGrace) force = true;
      next = std::min(next, since + kRetireGrace);
    } else if (!op->reapable() && !op->deadline().isNever()) {
      if (op->deadline().expired()) {
        if (op->timeOut()) {
          *rescan = true;  // it is retiring now: watch its grace period
        } else {
          // Its coroutine runs elsewhere and fails at its next wait.
          next = std::min(next, now + std::chrono::milliseconds(10));
        }
      } else {
        next = std::min(next, op->deadline().time());
      }
    }
  }
  if (force && !interrupted_) {
    MCCL_LOG(kWarn, host_.selfName(), ": transfers of a failed operation did not stop within ",
             kRetireGrace.count(), " s; closing the connections");
    interrupted_ = true;
    interrupt_();
  }
  engine_.reap();
  return next;
}

void Watchdog::loop() {
  MCCL_ASSERT_ON(owner_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // Anything that changes what to watch bumps kicks_ (under mu_), also
    // while this thread scans: a kick during the scan means scan again.
    const uint64_t seen = kicks_;
    wake_ = Clock::time_point::max();  // while scanning, every kick counts
    // Forget transfers that finished; fail the first one past its deadline.
    auto now = Clock::now();
    while (!watched_.empty()) {
      auto it = watched_.begin();
      auto t = it->second.transfer.lock();
      const bool own = it->second.limit.count() > 0;  // an op's own timeout, not the group's
      const auto limit = own ? it->second.limit : host_.config().timeout;
      if (!t || t->done()) {
        watched_.erase(it);
        continue;
      }
      if (it->first > now) break;
      watched_.erase(it);
      std::string what = t->describe();
      lock.unlock();
      host_.poison(Error(ErrorKind::kTimeout,
                         strCat(host_.selfName(), ": ", what, " did not complete within ",
                                own ? "its timeout of " : "the group timeout of ",
                                limit.count() / 1000.0, " s")));
      lock.lock();
    }
    if (host_.poisoned() && !watched_.empty()) watched_.clear();
    Clock::time_point next = watched_.empty() ? Clock::time_point::max() : watched_.begin()->first;
    lock.unlock();
    bool rescan = false;
    next = scanOps(now, next, &rescan);
    lock.lock();
    if (stop_) break;
    if (rescan) continue;
    auto changed = [&] { return stop_ || kicks_ != seen; };
    wake_ = next;
    if (next == Clock::time_point::max()) {
      cv_.wait(lock, changed);
    } else {
      cv_.wait_until(lock, next, changed);
    }
  }
}

}  // namespace mccl
