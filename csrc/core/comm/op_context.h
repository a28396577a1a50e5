// OpContext: one running collective, as its algorithm sees it. It reaches
// its group only through OpHost (comm/op_host.h).
//
// Algorithms are coroutines (comm/task.h). They post sends and receives of
// whole messages, identified by slot numbers of their choosing, and
// co_await them; they never touch sockets. Sends are zero copy (the memory
// must stay untouched until the send is awaited); receives land directly in
// the given memory.
//
// A wait resumes with an mccl::Error when the transfer failed, when the op
// passed its deadline (the watchdog calls timeOut()), or when the
// communicator was poisoned (it calls fail()); the message names this rank,
// the op, the transfer and the peer.
//
// Completion: the op's Work completes once its coroutine has returned or
// thrown and no transfer it posted can still touch its memory, so a caller
// may free the buffers as soon as the Work completes, even after a failure.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/op_host.h"
#include "comm/signature.h"
#include "comm/task.h"
#include "reduce/reduce.h"

namespace mccl {

class OpContext {
 public:
  OpContext(OpHost& comm, uint64_t seq, const OpSignature& sig, Deadline deadline,
            std::shared_ptr<Work> work);
  ~OpContext();
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  // ---- for algorithms ------------------------------------------------------
  int rank() const { return comm_.rank(); }
  uint64_t groupId() const { return comm_.groupId(); }
  int size() const { return comm_.size(); }
  uint64_t seq() const { return seq_; }
  const OpSignature& sig() const { return sig_; }
  const CommConfig& config() const { return comm_.config(); }
  const CostModel& model() const { return comm_.model(); }

  std::shared_ptr<SendRequest> isend(int peer, uint32_t slot, const void* data, size_t bytes);
  std::shared_ptr<RecvRequest> irecv(int peer, uint32_t slot, void* data, size_t bytes);

  struct Awaiter {
    OpContext& op;
    std::shared_ptr<Transfer> t;
    bool await_ready() const { return t->done() && !op.failed_.load(); }
    bool await_suspend(std::coroutine_handle<> h) {
      // A reference of this thread's own: once suspendOn has published the
      // wait, another thread may resume the body, which drops `t` with this
      // awaiter while suspendOn still reads it.
      const std::shared_ptr<Transfer> keep = t;
      return op.suspendOn(keep.get(), h);
    }
    void await_resume() { op.afterWait(*t); }
  };
  // co_await ctx.wait(request)
  Awaiter wait(std::shared_ptr<Transfer> t) { return Awaiter{*this, std::move(t)}; }
  // co_await ctx.waitAll(requests)
  template <typename Container>
  Task waitAll(const Container& transfers) {
    for (const auto& t : transfers) co_await wait(t);
  }

  // For algorithms that serve several flows of receives at once: read
  // received() before looking at which receives are done; when none is,
  // co_await ctx.waitProgress(seen, next) resumes once a receive of this op
  // finished after that read (at once if one did meanwhile), or the op
  // failed. It may also resume without one (a receive counted after the
  // read but seen done by the scan): callers scan again. `next` is the
  // transfer expected first: a timeout names it. A finished receive's own
  // error is raised by the wait() that takes it. Each wait has its own
  // token, so it may be called from nested Tasks and from several places.
  uint64_t received() const { return received_.load(); }
  struct ProgressAwaiter {
    OpContext& op;
    std::shared_ptr<Transfer> next;
    uint64_t seen;
    bool await_ready() const { return op.received_.load() != seen || op.failed_.load(); }
    bool await_suspend(std::coroutine_handle<> h) { return op.suspendOnProgress(next.get(), seen, h); }
    void await_resume() { op.throwIfFailed(); }
  };
  ProgressAwaiter waitProgress(uint64_t seen, std::shared_ptr<Transfer> next) {
    return ProgressAwaiter{*this, std::move(next), seen};
  }

  // Scratch memory from the communicator's pool, returned when dropped.
  Scratch scratch(size_t bytes) { return comm_.scratch(bytes); }

  // ---- for the communicator --------------------------------------------------
  // Runs the algorithm until it first waits (engine thread).
  void start(Task body);
  // Makes the op fail with `e`: at once if it is waiting, else at its next wait.
  void fail(const Error& e);
  // Fails the op with a timeout naming what it waits for (watchdog). Returns
  // true if it resumed the waiting coroutine (the op is failing now), false
  // if the coroutine is running elsewhere (it fails at its next wait).
  bool timeOut();
  // From Transfer::finish, on any thread.
  void transferFinished(Transfer& t);
  Deadline deadline() const { return deadline_; }
  // Whether the algorithm has returned and the op waits only for transfers
  // to retire (after a failure), and since when.
  bool retiring(Clock::time_point* since) const;
  // Whether the op is over and no thread uses it any more (it may be destroyed).
  bool reapable() const { return reapable_.load(); }

 private:
  friend struct Awaiter;
  friend struct ProgressAwaiter;
  bool suspendOn(Transfer* t, std::coroutine_handle<> h);
  bool suspendOnProgress(Transfer* next, uint64_t seen, std::coroutine_handle<> h);
  void afterWait(const Transfer& t);
  void throwIfFailed();

  // What a timeout describes while the body waits for progress: the
  // transfer expected first (describe(), peerRank()).
  class AnyTransfer : public Transfer {
   public:
    std::string describe() const override {
      return next != nullptr ? next->describe() : std::string("its next transfer");
    }
    int peerRank() const override { return next != nullptr ? next->peerRank() : -1; }
    Transfer* next = nullptr;
  };
  void bodyDone(std::exception_ptr error);
  void maybeComplete();

  OpHost& comm_;
  const uint64_t seq_;
  const OpSignature sig_;
  const Deadline deadline_;
  const Clock::time_point start_;
  std::shared_ptr<Work> work_;
  Task body_;

  std::coroutine_handle<> suspended_;
  // What the suspended body waits for: a Transfer* (low bit 0), a progress
  // wait's own token (odd: waits number << 1 | 1), or 0 when it is not
  // suspended or its resumption was claimed.
  std::atomic<uintptr_t> awaiting_{0};
  static uintptr_t bits(const Transfer* t) { return reinterpret_cast<uintptr_t>(t); }
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::unique_ptr<Error> failure_;  // raised at the next wait
  std::exception_ptr bodyError_;
  Clock::time_point bodyEnd_{};

  AnyTransfer any_;
  uint64_t progressWaits_ = 0;  // the body's thread only
  std::atomic<uint64_t> received_{0};  // receives finished so far
  std::atomic<int> outstanding_{0};  // posted transfers not yet finished
  std::atomic<bool> bodyDone_{false};
  std::atomic<bool> completed_{false};
  std::atomic<bool> reapable_{false};  // set last: nothing touches the op after it
};

}  // namespace mccl
