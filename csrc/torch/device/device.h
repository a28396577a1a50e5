// Device tensors: how an op's CUDA (or other stream-ordered device) tensors
// reach the core, which only ever sees host memory.
//
// Ordering, per op (DeviceStage):
//   caller's thread   record `produced` on the caller's current stream; the
//                     side stream waits for it; device-to-host copies into
//                     pinned buffers on the side stream; record `staged`.
//                     The caller is never blocked.
//   submit thread     waits until `staged` has completed (bounded by the op's
//                     timeout), then hands the host buffers to the core.
//   completing thread host-to-device copies on the side stream, record
//                     `done`, then completes Work and Future with the side
//                     stream current, so the Future's waiters' streams wait
//                     on it (DDP waits on the Future).
//   waiter            Work::wait / synchronize: the current stream waits on
//                     `done`; the host does not wait for the device.
//
// The device is reached through DeviceOps, a handful of stream and event
// calls: C10DeviceOps implements them with c10's device-generic stream and
// event API (so one build serves every torch, with or without CUDA), and a
// fake one tests the ordering on machines without a GPU.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mccl::torch_adapter {

// An event recorded on a stream; completes when the stream passes it.
struct DeviceEvent {
  virtual ~DeviceEvent() = default;
  virtual bool done() const = 0;
};
using EventPtr = std::shared_ptr<DeviceEvent>;

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual c10::Device device() const = 0;
  // Caller's thread: an event on the caller's current stream.
  virtual EventPtr recordCurrent() = 0;
  // The op's side stream waits (on the device) for `e`.
  virtual void sideWaits(const EventPtr& e) = 0;
  // Copies on the side stream (asynchronous; `host` is pinned).
  virtual void toHost(const at::Tensor& host, const at::Tensor& dev) = 0;
  virtual void toDevice(const at::Tensor& dev, const at::Tensor& host) = 0;
  virtual EventPtr recordSide() = 0;
  // The caller's current stream waits (on the device) for `e`.
  virtual void currentWaits(const EventPtr& e) = 0;
  // Pinned host memory shaped like `dev`, contiguous.
  virtual at::Tensor hostLike(const at::Tensor& dev) = 0;
  // A CPU tensor aliasing `dev`'s memory when the device's memory is
  // CPU-visible (MPS Shared storage): the core then works in place, after the
  // caller's stream has passed recordCurrent(). Undefined when not.
  virtual at::Tensor hostView(const at::Tensor& dev) { return {}; }
  // Throws (naming `who`) when results cannot be written into `dev`.
  virtual void checkWritable(const at::Tensor& dev, const std::string& who) {}
  // `t` is in use on the side stream: its memory must not be reused before.
  virtual void useOnSide(const at::Tensor& t) = 0;
  // Runs `fn` with the side stream as the current stream (completing thread).
  virtual void withSideCurrent(const std::function<void()>& fn) = 0;
  // Whether a Future on this device makes its waiters' streams wait (c10's
  // device-aware Future). If not (the fake device), completion waits for
  // the copies on the host first.
  virtual bool futureOrdersStreams() const { return true; }
  // Whether the Future's callbacks must run where the device is safe to use
  // rather than on MCCL's threads (MPS: one thread at a time; callbacks.h).
  virtual bool callbacksOnCaller() const { return false; }
  // Waits, at most `bound`, until the copies this op queued have run, where
  // a queued copy does not keep its tensors alive (Metal's blits): an op
  // that failed between queueing and completion releases them only after.
  // Devices whose allocator was told of the side stream (useOnSide) need not.
  virtual void drain(std::chrono::milliseconds bound) {}
};

// While alive on the calling thread, the caller queues nothing on its
// device stream but MCCL's own staging of one op (its pieces, one after the
// other): DeviceOps may reuse the event recorded first instead of recording
// one per piece (MPS: one fence, one commit on PyTorch's stream, per op).
class OneOpScope {
 public:
  OneOpScope();
  ~OneOpScope();
  OneOpScope(const OneOpScope&) = delete;
  OneOpScope& operator=(const OneOpScope&) = delete;
};
// The calling thread's innermost OneOpScope's id; 0 outside any.
uint64_t oneOpScopeId();

// The real thing: c10's generic stream/event API for `device`.
std::shared_ptr<DeviceOps> makeC10DeviceOps(c10::Device device);

// Tests may route a device type through other DeviceOps (a fake device).
using DeviceOpsFactory = std::function<std::shared_ptr<DeviceOps>(c10::Device)>;
void setDeviceOpsFactoryForTesting(DeviceOpsFactory factory);
std::shared_ptr<DeviceOps> deviceOpsFor(c10::Device device);

// Test mode (MCCL_FAKE_DEVICE_FOR_TESTING=<us>, read when mccl._C loads):
// CPU tensors are staged as if on a device, through a fake one
// (fake_device.cc). Off in normal use.
bool installFakeDeviceFromEnv();
void markFakeDevice();
bool fakeDeviceEnabled();
int64_t fakeDeviceViolations();
// Device copies that found their device tensor already freed (the fake
// Metal port holds device memory weakly, as Metal's queue does).
int64_t fakeDeviceLifetimeViolations();
// Whether `t` is staged through a DeviceStage (device tensors; CPU tensors
// too in the fake-device test mode).
bool stagedOnDevice(const at::Tensor& t);

// The device side of one op's staging.
class DeviceStage {
 public:
  DeviceStage(std::shared_ptr<DeviceOps> ops, std::string who);
  // Holds the staged tensors until the queued copies have run (drain()).
  ~DeviceStage();
  DeviceStage(const DeviceStage&) = delete;
  DeviceStage& operator=(const DeviceStage&) = delete;

  c10::Device device() const { return ops_->device(); }
  // Host memory holding `dev`'s contents once staged() has completed: a view
  // of the device memory where the device allows (hostView), else a copy.
  at::Tensor stageIn(const at::Tensor& dev);
  // Host buffer whose contents go to `dev` in copyBack().
  at::Tensor stageOut(const at::Tensor& dev);
  // Host buffer both ways.
  at::Tensor stageInOut(const at::Tensor& dev);
  // Throws when results cannot be written into `dev` (before the op runs).
  void checkWritable(const at::Tensor& dev) { ops_->checkWritable(dev, who_); }
  // Also copy `host` (a view of a staged buffer) into `dev` in copyBack().
  void copyBackLater(const at::Tensor& dev, const at::Tensor& host) { back_.emplace_back(dev, host); }
  // After the last stage*: the event the submit thread must wait for (null
  // when nothing was copied in).
  EventPtr seal();
  // Waits for `staged` (from seal()), polling; throws naming the op past
  // `deadline`.
  void waitStaged(const EventPtr& staged, std::chrono::steady_clock::time_point deadline) const;
  // Completing thread, in two steps (one op may be several pieces, each with
  // its stage): copyBack() queues the copies back and records `done`;
  // complete() then runs `complete` (which marks Work and Future) once for
  // the whole op with the side stream current, after the side stream has
  // also waited for `after` (the other pieces' done events).
  void copyBack();
  void complete(const std::vector<EventPtr>& after, const std::function<void()>& complete);
  // On failure, before copyBack(): nothing is copied back.
  void dropCopyBacks() { back_.clear(); }
  // The event the results are ready at (after copyBack()).
  EventPtr done() const { return done_; }
  DeviceOps& ops() { return *ops_; }

 private:
  void begin();
  at::Tensor view(const at::Tensor& dev);

  std::shared_ptr<DeviceOps> ops_;
  std::string who_;
  bool begun_ = false;
  bool copiedIn_ = false;
  bool viewed_ = false;  // the core works in the device memory of some tensor
  EventPtr produced_;
  EventPtr staged_;
  EventPtr done_;
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;  // (device, host)
  std::vector<at::Tensor> keep_;
};

}  // namespace mccl::torch_adapter
