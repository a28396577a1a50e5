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
//      collective of any group: it is about to use MPS itself), or any
//      thread that waits for the op through MCCL (Work.wait, is_completed);
//   2. else MCCL's callback thread ("mccl-callbacks"), once the issuing
//      thread is parked: not running, its CPU time unchanged for 1 ms. A
//      thread blocked in Future.wait() on a future chained from this one
//      (DDP's reducer at the end of backward) is parked, and nothing of its
//      runs MPS until the callbacks have;
//   3. else, past MCCL_CALLBACK_DEADLINE_MS, the callback thread anyway (a
//      thread that neither calls MCCL nor parks, e.g. one polling
//      Future.done() while it computes), with a warning once per process.
//
// What stays possible: a thread parked on something else (a data queue, a
// sleep) that wakes while the callback thread runs a callback of its op.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace mccl::torch_adapter {

// A thread that issues ops (one per thread, made on first use).
class Issuer;
std::shared_ptr<Issuer> thisThreadIssuer();

// Where a deferred mark ran (counted; tests and docs read the counts).
enum class MarkedOn { kIssuer, kWaiter, kParked, kDeadline };

// One Future waiting to be marked.
class PendingMark {
 public:
  PendingMark(std::shared_ptr<Issuer> issuer, std::function<void()> mark);
  // Runs the mark on the calling thread unless it ran or runs elsewhere; in
  // any case returns once it has run (at once when this thread runs it
  // further up its stack: a callback waiting for its own op).
  void runHere(MarkedOn where);
  bool done() const;
  bool pending() const;
  const std::shared_ptr<Issuer>& issuer() const { return issuer_; }
  int64_t ageMs() const;

 private:
  enum class State { kPending, kRunning, kDone };
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

// MCCL entry points: runs, on the calling thread, every pending mark of the
// ops this thread issued.
void runMarksOfThisThread();

struct MarkCounts {
  int64_t onIssuer = 0, onWaiter = 0, whileParked = 0, atDeadline = 0, pending = 0;
};
MarkCounts markCounts();

// Whether the calling thread is the callback thread (tests).
bool onCallbackThread();

}  // namespace mccl::torch_adapter
