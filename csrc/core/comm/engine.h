// Engine: the collectives of one group, from submit() to completion.
//
// submit() gives each collective the group's next sequence number, in call
// order. The engine thread starts queued ops in that order, up to
// MCCL_INFLIGHT_OPS at a time, so several can be on the wire at once; a
// small op on an idle group starts on the calling thread instead (its first
// segment only posts receives and writes small frames without blocking),
// saving the hand-off. An op's algorithm is a coroutine (comm/task.h) that
// connection threads resume as its transfers complete; finished ops are
// reaped when the next op starts, and by the watchdog.
//
// Threads: submit() from any thread; the engine thread runs loop();
// opCompleted() from whichever thread finishes an op; active() and reap()
// from the watchdog and the shutting-down thread; drain(), stop() and
// retire() from the shutting-down thread only (never the engine thread).
// Locks: queueMu_ (queue, sequence numbers, running count), opsMu_ (running
// ops); never both at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/matching.h"
#include "comm/op_host.h"
#include "comm/signature.h"
#include "comm/task.h"
#include "comm/work.h"
#include "util/thread_check.h"
#include "util/time.h"

namespace mccl {

class OpContext;

class Engine {
 public:
  // Creates the op's algorithm coroutine (not yet started).
  using Body = std::function<Task(OpContext&)>;

  // `newDeadline` is told each started op's deadline (the watchdog's kick).
  Engine(OpHost& host, Matching& matching, std::function<void(Clock::time_point)> newDeadline);
  ~Engine();

  void start();
  // Enqueues a collective (see above); `timeout` <= 0 means the group's.
  std::shared_ptr<Work> submit(const OpSignature& sig, std::chrono::milliseconds timeout, Body body,
                               std::string description, bool small);
  // An op's Work is final: its matching state goes, one op fewer runs, then
  // `work` completes (its callbacks run on this thread).
  void opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error);

  // Waits up to `grace` until nothing is queued or running; false if
  // something still is.
  bool drain(std::chrono::milliseconds grace);
  // Later submits fail; the engine thread starts what is queued (a poisoned
  // group fails it at once) and ends.
  void stop();
  // After stop(): waits for running ops (failed ones retire once their
  // transfers have failed), calling `interrupt` if they take over 2 s.
  void retire(const std::function<void()>& interrupt);

  std::vector<std::shared_ptr<OpContext>> active();
  // Frees ops that are over (off their own stacks, outside any lock).
  void reap();

 private:
  struct QueuedOp {
    uint64_t seq;
    OpSignature sig;
    std::chrono::milliseconds timeout;
    Body body;
    std::shared_ptr<Work> work;
  };
  void loop();
  void beginLocked(QueuedOp& q, std::unique_lock<std::mutex>& lock);
  void startOp(QueuedOp& q);

  OpHost& host_;
  Matching& matching_;
  const std::function<void(Clock::time_point)> newDeadline_;
  ThreadOwner owner_{"mccl-engine"};

  std::mutex queueMu_;
  std::condition_variable queueCv_;
  std::deque<QueuedOp> queue_;
  uint64_t nextSeq_ = 0;
  int running_ = 0;
  bool stopping_ = false;
  bool draining_ = false;  // drain() waits on queueCv_
  std::thread thread_;

  std::mutex opsMu_;
  std::vector<std::shared_ptr<OpContext>> ops_;
};

}  // namespace mccl
