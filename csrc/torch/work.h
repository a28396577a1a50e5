// WorkMCCL and the tensor plumbing of the torch adapter.
//
// Threads: WorkMCCL is completed on an MCCL thread (see comm/work.h: a
// connection thread, the engine or the watchdog thread). Completion first copies staged outputs
// back into the caller's tensors, then marks the Work and its Future; so
// whoever waits (Work::wait, DDP's future->wait(), a then() callback) sees
// final values. Future callbacks therefore run on MCCL threads (CPU and
// CUDA ops; never a network thread for device ops) -- except MPS ops, whose
// Future is marked where MPS is safe (callbacks.h): on the issuing thread at
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

#include "callbacks.h"
#include "comm/work.h"
#include "device.h"
#include "util/dtype.h"

namespace mccl::torch_adapter {

// What the core sees of a tensor: contiguous memory of `count` elements.
struct View {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};

// The core dtype for a tensor dtype; complex types travel as pairs of their
// real type. Throws TypeError naming `who` (op and rank) for anything else.
DataType coreDtype(at::ScalarType type, const std::string& who, size_t* perElement);
// "float32", "complex64", ... (torch's names without the "torch." prefix).
std::string dtypeLabel(at::ScalarType type);

struct CoreReduce {
  ReduceOp op = ReduceOp::kSum;
  double premulFactor = 1.0;
};
// Throws TypeError naming `who` when `op` cannot apply to `type`.
CoreReduce coreReduce(const c10d::ReduceOp& op, at::ScalarType type, const std::string& who);

// The memory an op works on, and the copies to make when it completes.
// CPU tensors are used in place when contiguous; device tensors go through
// pinned host buffers (DeviceStage). All device tensors of one op must be on
// one device.
class Staging {
 public:
  Staging() = default;
  // `who` names the op and rank in errors: "mccl allreduce (rank 1/4, ...)".
  explicit Staging(std::string who) : who_(std::move(who)) {}
  // Read-only: the tensor's own memory when contiguous, else a copy.
  View input(const at::Tensor& t);
  // Written: own memory when contiguous, else a temporary copied back.
  View output(const at::Tensor& t);
  // Read and written in place: like output(), the temporary starts as a copy.
  View inout(const at::Tensor& t);
  // Like output(), but a temporary (copied back at the end) when `t` shares
  // memory with any of `reads`: an algorithm may write its output before it
  // has read all of its input (the ring reduce-scatter uses the output as
  // scratch), so an in-place call must not see its input overwritten.
  View outputApart(const at::Tensor& t, const std::vector<at::Tensor>& reads);
  // Like input(), but read from a copy made now (on the caller's stream)
  // when `t` is a device tensor sharing memory with `written`: staged
  // device memory may be the tensor's own (MPS Shared storage), so
  // outputApart cannot keep them apart there.
  View inputApart(const at::Tensor& t, const at::Tensor& written);
  // One flat buffer for several tensors of one dtype (coalesced ops).
  View flatten(const std::vector<at::Tensor>& ts, bool writeBack);
  // Runs the copy-backs and then `complete` (on the completing thread; with
  // the device's side stream current for device ops). With `error`, skips
  // the copy-backs.
  void finish(bool error, const std::function<void()>& complete);
  // finish() in two steps, for ops run in pieces: finishPiece() runs or
  // queues this piece's copy-backs as soon as its core op is done (skipped
  // after an error) ...
  void finishPiece(bool error);
  // ... and, after every piece's finishPiece, finishJoined() completes the op
  // through this piece's stage once the side stream has waited for `after`.
  // (`error`: the op failed; nothing more is copied.)
  void finishJoined(bool error, const std::vector<EventPtr>& after,
                    const std::function<void()>& complete);
  // The last piece of an op on a strided tensor: once every piece is done,
  // copy `src` (the contiguous copy the pieces worked on) into `dst`.
  void copyBackAtEnd(const at::Tensor& dst, const at::Tensor& src);
  // The piece's done event (after finishPiece; null when nothing was copied).
  EventPtr doneEvent() const { return dev_ ? dev_->done() : nullptr; }
  void keep(const at::Tensor& t) { keep_.push_back(t); }
  // The device op's stage (null for CPU-only ops). seal() it before the core
  // may read the inputs.
  const std::shared_ptr<DeviceStage>& device() const { return dev_; }
  std::vector<c10::Device> devices() const;
  // Whether the op's Future callbacks must run where the device is safe to
  // use (MPS: callbacks.h).
  bool callbacksOnCaller() const { return dev_ && dev_->ops().callbacksOnCaller(); }
  const std::string& who() const { return who_; }

 private:
  View viewOf(const at::Tensor& t);
  // A contiguous temporary for `t`, copied back at the end.
  View temporaryOutput(const at::Tensor& t);
  DeviceStage& stage(const at::Tensor& t);
  std::shared_ptr<DeviceStage> dev_;
  std::string who_;
  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack_;  // (caller's, staged)
  std::vector<std::pair<at::Tensor, at::Tensor>> atEnd_;     // (caller's, contiguous copy)
};

class WorkMCCL : public c10d::Work {
 public:
  // `devices` (empty for CPU ops) makes the Future device-aware: its waiters'
  // current streams wait for the results instead of the host.
  // `callbacksOnCaller`: the Future is marked where MPS is safe
  // (callbacks.h), not by the MCCL thread that completes the op.
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
