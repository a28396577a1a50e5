#include "device/device.h"

#include "device/completer.h"
#include "device/mps_device.h"

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace mccl::torch_adapter {
namespace {

struct C10Event final : DeviceEvent {
  explicit C10Event(c10::DeviceType type) : event(type) {}
  bool done() const override { return event.query(); }
  c10::Event event;
};

class C10DeviceOps final : public DeviceOps {
 public:
  explicit C10DeviceOps(c10::Device device)
      : device_(device),
        impl_(device.type()),
        side_(impl_.getStreamFromGlobalPool(device, /*isHighPriority=*/false)) {}

  c10::Device device() const override { return device_; }

  EventPtr recordCurrent() override {
    auto e = std::make_shared<C10Event>(device_.type());
    e->event.record(impl_.getStream(device_));
    return e;
  }
  void sideWaits(const EventPtr& e) override { cast(e).event.block(side_); }
  void toHost(const at::Tensor& host, const at::Tensor& dev) override {
    c10::StreamGuard guard(side_);
    host.copy_(dev, /*non_blocking=*/true);
  }
  void toDevice(const at::Tensor& dev, const at::Tensor& host) override {
    c10::StreamGuard guard(side_);
    dev.copy_(host, /*non_blocking=*/true);
  }
  EventPtr recordSide() override {
    auto e = std::make_shared<C10Event>(device_.type());
    e->event.record(side_);
    return e;
  }
  void currentWaits(const EventPtr& e) override {
    cast(e).event.block(impl_.getStream(device_));
  }
  at::Tensor hostLike(const at::Tensor& dev) override {
    return at::empty(dev.sizes(), dev.options().device(at::kCPU).pinned_memory(true)
                                      .memory_format(at::MemoryFormat::Contiguous));
  }
  void useOnSide(const at::Tensor& t) override {
    if (t.has_storage()) impl_.recordDataPtrOnStream(t.storage().data_ptr(), side_);
  }
  void withSideCurrent(const std::function<void()>& fn) override {
    c10::StreamGuard guard(side_);
    fn();
  }

 private:
  static C10Event& cast(const EventPtr& e) { return static_cast<C10Event&>(*e); }

  c10::Device device_;
  c10::impl::VirtualGuardImpl impl_;
  c10::Stream side_;
};

std::mutex gFactoryMu;
DeviceOpsFactory gFactory;
std::atomic<bool> gFake{false};

}  // namespace

std::shared_ptr<DeviceOps> makeC10DeviceOps(c10::Device device) {
  return std::make_shared<C10DeviceOps>(device);
}

void setDeviceOpsFactoryForTesting(DeviceOpsFactory factory) {
  std::lock_guard<std::mutex> lock(gFactoryMu);
  gFactory = std::move(factory);
}

void markFakeDevice() { gFake.store(true); }

bool fakeDeviceEnabled() { return gFake.load(std::memory_order_relaxed); }

bool stagedOnDevice(const at::Tensor& t) { return !t.device().is_cpu() || fakeDeviceEnabled(); }

std::shared_ptr<DeviceOps> deviceOpsFor(c10::Device device) {
  {
    std::lock_guard<std::mutex> lock(gFactoryMu);
    if (gFactory) {
      if (auto ops = gFactory(device)) return ops;
    }
  }
  if (device.is_mps()) return makeMpsDeviceOps(metalPort("mccl"), device);
  return makeC10DeviceOps(device);
}

DeviceStage::DeviceStage(std::shared_ptr<DeviceOps> ops, std::string who)
    : ops_(std::move(ops)), who_(std::move(who)) {}

namespace {
thread_local uint64_t tScopeId = 0;
thread_local int tScopeDepth = 0;
std::atomic<uint64_t> gScopes{0};
}  // namespace

OneOpScope::OneOpScope() {
  if (tScopeDepth++ == 0) tScopeId = gScopes.fetch_add(1) + 1;
}

OneOpScope::~OneOpScope() {
  if (--tScopeDepth == 0) tScopeId = 0;
}

uint64_t oneOpScopeId() { return tScopeId; }

DeviceStage::~DeviceStage() {
  // After complete() the copies have run (or the allocator knows of them);
  // an op that failed in between (an output refused after an input was
  // queued for copying) still has copies reading keep_.
  ops_->drain(std::chrono::seconds(10));
}

void DeviceStage::begin() {
  if (begun_) return;
  begun_ = true;
  // Everything the caller queued before this op (producing the inputs, or
  // still reading the outputs) happens before the side stream touches them.
  produced_ = ops_->recordCurrent();
  ops_->sideWaits(produced_);
}

at::Tensor DeviceStage::view(const at::Tensor& dev) {
  at::Tensor v = ops_->hostView(dev);
  if (v.defined()) {
    viewed_ = true;
    keep_.push_back(dev);
  }
  return v;
}

at::Tensor DeviceStage::stageIn(const at::Tensor& dev) {
  begin();
  if (at::Tensor v = view(dev); v.defined()) return v;
  at::Tensor host = ops_->hostLike(dev);
  ops_->toHost(host, dev);
  ops_->useOnSide(dev);
  keep_.push_back(dev);
  keep_.push_back(host);
  copiedIn_ = true;
  return host;
}

at::Tensor DeviceStage::stageOut(const at::Tensor& dev) {
  begin();
  ops_->checkWritable(dev, who_);
  if (at::Tensor v = view(dev); v.defined()) return v;
  at::Tensor host = ops_->hostLike(dev);
  back_.emplace_back(dev, host);
  return host;
}

at::Tensor DeviceStage::stageInOut(const at::Tensor& dev) {
  begin();
  ops_->checkWritable(dev, who_);
  if (at::Tensor v = view(dev); v.defined()) return v;
  at::Tensor host = stageIn(dev);
  back_.emplace_back(dev, host);
  return host;
}

EventPtr DeviceStage::seal() {
  // The core may touch the host buffers once the copies in are done, and
  // device memory it works on in place once the caller's stream is past it.
  if (copiedIn_) {
    staged_ = ops_->recordSide();
  } else if (viewed_) {
    staged_ = produced_;
  }
  return staged_;
}

void DeviceStage::waitStaged(const EventPtr& staged,
                             std::chrono::steady_clock::time_point deadline) const {
  if (!staged) return;
  auto pause = std::chrono::microseconds(5);
  while (!staged->done()) {
    TORCH_CHECK(std::chrono::steady_clock::now() < deadline, who_,
                ": the device-to-host copy of the inputs did not finish within the op's timeout "
                "(is the device hung, or a kernel before this op still running?)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

void DeviceStage::copyBack() {
  for (auto& [dev, host] : back_) {
    ops_->toDevice(dev, host);
    ops_->useOnSide(dev);
    keep_.push_back(dev);  // until the copies are done (complete())
    keep_.push_back(host);
  }
  back_.clear();
  done_ = ops_->recordSide();
}

void DeviceStage::complete(const std::vector<EventPtr>& after,
                           const std::function<void()>& complete) {
  if (!after.empty() || !done_) {
    for (const auto& e : after) ops_->sideWaits(e);
    done_ = ops_->recordSide();
  }
  if (!ops_->futureOrdersStreams()) {
    // The host waits for the copies (MPS): not here, on the network thread
    // that finished the op, but on the completion thread. The staged
    // tensors stay alive until then.
    completeWhen(done_, [ops = ops_, keep = std::move(keep_), complete]() mutable {
      keep.clear();  // the copies are done: staging buffers go back first
      ops->withSideCurrent(complete);
    });
    keep_.clear();
    return;
  }
  // useOnSide told the allocator about the side stream: the tensors may go.
  keep_.clear();
  ops_->withSideCurrent(complete);
}

}  // namespace mccl::torch_adapter
