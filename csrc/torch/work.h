// WorkMCCL: the c10d Work of an op, completed when its core ops are.
//
// Threads: WorkMCCL is completed on an MCCL thread (see comm/work.h: a
// connection thread, the engine or the watchdog thread). Completion first copies staged outputs
// back into the caller's tensors, then marks the Work and its Future; so
// whoever waits (Work::wait, DDP's future->wait(), a then() callback) sees
// final values. Future callbacks therefore run on MCCL threads (CPU and
// CUDA ops; never a network thread for device ops) -- except MPS ops, whose
// Future is marked where MPS is safe (device/callbacks.h): on the issuing thread at
// its next MCCL call, on a thread waiting through MCCL, or once the issuing
// thread is parked.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/work.h"
#include "device/callbacks.h"
#include "device/staging.h"
#include "dtypes.h"

namespace mccl::torch_adapter {

class WorkMCCL : public c10d::Work {
 public:
  // `devices` (empty for CPU ops) makes the Future device-aware: its waiters'
  // current streams wait for the results instead of the host.
  // `callbacksOnCaller`: the Future is marked where MPS is safe
  // (device/callbacks.h), not by the MCCL thread that completes the op.
  WorkMCCL(int rank, c10d::OpType type, const char* profilingTitle,
           std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
           std::vector<c10::Device> devices = {}, bool callbacksOnCaller = false);
  ~WorkMCCL() override;
  // The group whose op this is, for MCCL_TRACE_DIR (set before it is returned).
  void setTraceGroup(uint64_t group) { traceGroup_ = group; }

  // Completes when every core op does; call once, after construction.
  void track(std::vector<std::shared_ptr<mccl::Work>> core, Staging staging);
  // An op run in pieces: core[i] works on pieces[i]; each piece's results are
  // copied back as soon as it is done. Call once instead of track().
  void trackPieces(std::vector<std::shared_ptr<mccl::Work>> core, std::vector<Staging> pieces);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  // Device ops: the current stream waits for the results (no host wait).
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void onCoreDone();
  // Marks Work and Future (once); device ops: on the completion thread.
  void markDone(std::exception_ptr error);
  // The Future's deferred mark, run on the calling thread if still pending
  // (else waited for, up to timeoutMs when positive); false on timeout.
  bool runMarkHere(int64_t timeoutMs = 0);
  Staging& lastStaging() { return pieces_.empty() ? staging_ : pieces_.back(); }

  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> inputs_;
  std::vector<std::shared_ptr<mccl::Work>> core_;
  Staging staging_;
  std::vector<Staging> pieces_;
  std::exception_ptr pieceError_;  // a piece's failed copy-back
  EventPtr done_;  // device ops: results are in place when this completes
  std::atomic<int> pending_{0};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Issuer> issuer_;    // set: the Future's mark is deferred
  std::shared_ptr<PendingMark> mark_;  // once complete (under mutex_)
  // Under mutex_: getFuture() was called (the Future is then marked on a
  // callback thread, callback_pool.h), and that mark has happened.
  bool futureRequested_ = false;
  uint64_t traceGroup_ = 0;  // MCCL_TRACE_DIR's events of this Work name the group
  bool futureMarked_ = false;
  // Under mutex_: the Future is marked if the caller holds it and it is
  // marked on a callback thread (MPS marks are run or waited for apart).
  bool futureCaughtUp() const { return issuer_ || !futureRequested_ || futureMarked_; }
  std::once_flag futureOnce_;
  std::string description_;
};

// Maps an exception from the core to what torch users expect: usage errors
// become ValueError; everything else DistBackendError.
std::exception_ptr toTorchError(const std::exception_ptr& e);
[[noreturn]] void rethrowAsTorch(const std::exception& e);

}  // namespace mccl::torch_adapter
