// Staging: the memory an op's tensors give the core, which only ever sees
// host memory. CPU tensors are used in place when contiguous (else through
// a contiguous copy); tensors on a device go through a DeviceStage
// (device.h), which copies them to host memory and back in stream order.
//
// Threads: the op's calling thread makes the views (input(), output(), ...);
// finish() and its two steps run on the thread that completes the op (an
// MCCL thread: see work.h).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "util/dtype.h"

namespace mccl::torch_adapter {

// What the core sees of a tensor: contiguous memory of `count` elements.
struct View {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};

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

}  // namespace mccl::torch_adapter
