// Where the Future callbacks (then()) of MPS ops run.
//
// PyTorch's MPS runtime is unsafe to use from two threads at once (docs/
// mps.md, "Threads"), and a callback commonly runs MPS kernels (DDP comm
// hooks decompress into the bucket). So an MPS op's Future is not marked
// (its callbacks not run) by the MCCL thread that finished the op. The op's
// results are in place and its Work reports completion at once; marking the
// Future waits for a place where MPS is safe:
//
//   1. the thread that issued the op, when it next calls MCCL (any
//      collective of any group: it is about to use MPS itself), or a thread
//      that waits for the op through MCCL (Work.wait, is_completed);
//   2. else a callback runner thread ("mccl-cb-run"), once every other
//      thread of the process that may use MPS -- all but MCCL's network,
//      engine and completion threads -- has been still for 1 ms: not
//      running or runnable, its CPU time unchanged. One mark per such quiet
//      spell, so two callbacks never run at once. A thread blocked in
//      Future.wait() on a chained future (DDP's reducer at the end of
//      backward) is still, and cannot run MPS before the callbacks have.
//      A callback may itself issue ops and wait for them (PowerSGD): their
//      marks go to another runner at the next quiet spell;
//   3. else, past MCCL_CALLBACK_DEADLINE_MS, a runner anyway (a process
//      where some thread never rests, e.g. one polling Future.done() while
//      it computes), with a warning once per process; the mark of the op
//      that completed first goes first, and
//      only while no runner is inside a callback that is not waiting for
//      an op (WaitingInCallback), so callbacks never run two at a time.
//
// What stays possible: a still thread that wakes (a data queue, a sleep)
// while a runner runs a callback, and a thread entering MCCL while one runs.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace mccl::torch_adapter {

// A thread that issues ops (one per thread, made on first use).
class Issuer;
// The issuer of ops made now: this thread's, or, inside a callback a runner
// runs, the issuer of that callback's op.
std::shared_ptr<Issuer> currentIssuer();

// Where a deferred mark ran (counted; tests and docs read the counts).
enum class MarkedOn { kIssuer, kWaiter, kQuiet, kDeadline };

// One Future waiting to be marked.
class PendingMark {
 public:
  PendingMark(std::shared_ptr<Issuer> issuer, std::function<void()> mark);
  // Runs the mark here if nobody has taken it; true if this call ran it.
  bool tryRun(MarkedOn where);
  // tryRun, else waits (without the GIL) up to `timeoutMs` (<= 0: no limit)
  // for the thread that runs it; false on timeout. Returns at once when this
  // thread runs it further up its stack (a callback waiting for its own op).
  bool runOrWait(MarkedOn where, int64_t timeoutMs = 0);
  bool done() const;
  bool pending() const;
  // Whether the calling thread runs it now, further up its stack.
  bool runningHere() const;
  const std::shared_ptr<Issuer>& issuer() const { return issuer_; }
  int64_t ageMs() const;

 private:
  enum class State { kPending, kRunning, kDone };
  void run(std::unique_lock<std::mutex>& lock, MarkedOn where);
  std::shared_ptr<Issuer> issuer_;
  std::function<void()> mark_;
  int64_t since_;  // steady clock, ns
  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kPending;
  std::thread::id runner_;
};

// Completion thread: the op is complete; `mark` marks its Future. Returns
// the pending mark (Work::wait runs it on the waiting thread).
std::shared_ptr<PendingMark> deferMark(std::shared_ptr<Issuer> issuer, std::function<void()> mark);

// Alive while a callback on a runner thread blocks for an op (Work.wait, a
// mark another thread runs): the runner counts as waiting, not running, and
// a mark past the deadline may go to another runner meanwhile (the op it
// waits for may need that). Elsewhere it does nothing.
class WaitingInCallback {
 public:
  WaitingInCallback();
  ~WaitingInCallback();
  WaitingInCallback(const WaitingInCallback&) = delete;
  WaitingInCallback& operator=(const WaitingInCallback&) = delete;

 private:
  bool counted_;
};

// MCCL entry points: runs, on the calling thread, every pending mark of the
// ops the current issuer issued.
void runMarksOfThisThread();

// MCCL_CALLBACK_DEADLINE_MS, read when a group is made (0: none).
void setCallbackDeadlineMs(int64_t ms);

struct MarkCounts {
  int64_t onIssuer = 0, onWaiter = 0, whileQuiet = 0, atDeadline = 0, pending = 0;
};
MarkCounts markCounts();

// Whether the calling thread is one of MCCL's callback runners (tests).
bool onCallbackThread();
// The calling thread's stack size in bytes (tests; 0 if unknown).
size_t thisThreadStackBytes();

}  // namespace mccl::torch_adapter
