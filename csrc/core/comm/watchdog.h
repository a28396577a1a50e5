// Watchdog: the group's deadlines. It fails a point-to-point transfer or a
// collective that passes its deadline (poisoning the group with a timeout
// that names what was awaited), forces ops that failed but whose transfers
// do not retire (closing the connections after a grace period), and reaps
// finished ops the engine has not.
//
// It sleeps until the earliest deadline it knows. Anything that adds an
// earlier one kicks it; a deadline after its next wake-up costs nothing (one
// wake-up per small op would cost each a context switch).
//
// Threads: the watchdog thread runs loop(); watch() and kick() from any
// thread; stop() from the shutting-down thread only. Lock: mu_ (never held
// while poisoning or scanning ops).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/engine.h"
#include "comm/op_host.h"
#include "comm/transfer.h"
#include "util/thread_check.h"
#include "util/time.h"

namespace mccl {

class Watchdog {
 public:
  // `interrupt` shuts the group's connections (stuck transfers fail now).
  Watchdog(OpHost& host, Engine& engine, std::function<void()> interrupt);
  ~Watchdog();

  void start();
  void stop();
  // Fails `t` (poisons the group) if it is not done by `deadline`, which is
  // `limit` after it started (named in the error; 0: the group timeout).
  void watch(Deadline deadline, std::weak_ptr<Transfer> t,
             std::chrono::milliseconds limit = std::chrono::milliseconds(0));
  // Rescans now (something it watches changed: ops failed, a new op).
  void kick();
  // Rescans if `deadline` is earlier than its next wake-up.
  void kick(Clock::time_point deadline);

 private:
  void loop();
  // One pass over the running ops; returns the next time to look, and sets
  // *rescan when an op began to fail now.
  Clock::time_point scanOps(Clock::time_point now, Clock::time_point next, bool* rescan);

  OpHost& host_;
  Engine& engine_;
  const std::function<void()> interrupt_;
  bool interrupted_ = false;  // watchdog thread only
  ThreadOwner owner_{"mccl-watchdog"};

  std::mutex mu_;
  std::condition_variable cv_;
  struct Watched {
    std::weak_ptr<Transfer> transfer;
    std::chrono::milliseconds limit;
  };
  std::multimap<Clock::time_point, Watched> watched_;
  bool stop_ = false;
  uint64_t kicks_ = 0;  // bumped whenever it must rescan
  // When the sleeping watchdog wakes on its own (max while it scans, or when
  // it has nothing to watch): a deadline after that needs no wake-up.
  Clock::time_point wake_ = Clock::time_point::max();
  std::thread thread_;
};

}  // namespace mccl
