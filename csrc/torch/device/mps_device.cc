#include "device/mps_device.h"

#include <c10/util/Exception.h>

#include <thread>

namespace mccl::torch_adapter {
namespace {

// Done when one of the port's events has reached `value`.
struct ValueEvent final : DeviceEvent {
  ValueEvent(std::shared_ptr<MetalPort> port, bool fence, uint64_t value)
      : port(std::move(port)), fence(fence), value(value) {}
  bool done() const override {
    return (fence ? port->fenceValue() : port->copyValue()) >= value;
  }
  std::shared_ptr<MetalPort> port;
  bool fence;
  uint64_t value;
};

class MpsDeviceOps final : public DeviceOps {
 public:
  MpsDeviceOps(std::shared_ptr<MetalPort> port, c10::Device device)
      : port_(std::move(port)), device_(device) {}
  c10::Device device() const override { return device_; }

  EventPtr recordCurrent() override {
    // The pieces of one op share the first piece's fence (OneOpScope).
    thread_local struct {
      uint64_t scope = 0;
      const MetalPort* port = nullptr;
      uint64_t value = 0;
    } last;
    const uint64_t scope = oneOpScopeId();
    if (scope != 0 && last.scope == scope && last.port == port_.get()) {
      after_ = last.value;
    } else {
      after_ = port_->fence();
      last = {scope, port_.get(), after_};
    }
    return std::make_shared<ValueEvent>(port_, true, after_);
  }
  // MCCL's copies wait for the latest fence (recordCurrent) on the GPU.
  void sideWaits(const EventPtr&) override {}
  void toHost(const at::Tensor& host, const at::Tensor& dev) override {
    at::Tensor src = dev;
    if (!src.is_contiguous()) {
      // On the caller's thread and stream, then fenced again. The queued
      // blit does not keep the copy alive (PyTorch's allocator could hand
      // its memory to another tensor before the blit runs): this op does.
      src = dev.contiguous();
      after_ = port_->fence();
      temps_.push_back(src);
    }
    pending_.push_back({host, src, false});
  }
  void toDevice(const at::Tensor& dev, const at::Tensor& host) override {
    if (dev.is_contiguous()) {
      pending_.push_back({host, dev, true});
      return;
    }
    // Strided and Shared (checkWritable refused Private): the CPU scatters
    // the results into place once the caller's stream is past the fence.
    void* p = port_->cpuAddress(dev);
    TORCH_CHECK(p != nullptr, "mccl: strided MPS output in Private storage");
    currentWaits(std::make_shared<ValueEvent>(port_, true, after_));
    at::from_blob(p, dev.sizes(), dev.strides(), dev.options().device(at::kCPU)).copy_(host);
  }
  // The copies queued since the last call go in one command buffer.
  EventPtr recordSide() override {
    if (!pending_.empty()) {
      lastCopy_ = port_->copies(pending_, after_);
      pending_.clear();
    }
    return std::make_shared<ValueEvent>(port_, false, lastCopy_);
  }
  // The host waits (MCCL's threads never encode into PyTorch's stream).
  void currentWaits(const EventPtr& e) override {
    auto pause = std::chrono::microseconds(2);
    while (!e->done()) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(100));
    }
  }
  at::Tensor hostLike(const at::Tensor& dev) override { return port_->sharedLike(dev); }
  at::Tensor hostView(const at::Tensor& dev) override {
    if (!dev.is_contiguous()) return {};
    auto cpu = dev.options().device(at::kCPU);
    if (dev.numel() == 0) return at::empty(dev.sizes(), cpu);
    void* p = port_->cpuAddress(dev);
    if (p == nullptr) return {};
    // The view owns a reference to the device tensor's storage.
    return at::from_blob(p, dev.sizes(), [keep = dev](void*) {}, cpu);
  }
  void checkWritable(const at::Tensor& dev, const std::string& who) override {
    TORCH_CHECK_VALUE(dev.is_contiguous() || dev.numel() == 0 || port_->cpuAddress(dev) != nullptr,
                      who, ": a strided MPS output (sizes ", dev.sizes(), ", strides ",
                      dev.strides(), ") in Private storage cannot be written by mccl; pass a "
                      "contiguous tensor (strided ones work where MPS memory is Shared)");
  }
  void useOnSide(const at::Tensor&) override {}
  void withSideCurrent(const std::function<void()>& fn) override { fn(); }
  bool futureOrdersStreams() const override { return false; }
  bool callbacksOnCaller() const override { return true; }
  void drain(std::chrono::milliseconds bound) override {
    auto until = std::chrono::steady_clock::now() + bound;
    while (port_->copyValue() < lastCopy_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<MetalPort> port_;
  c10::Device device_;
  uint64_t after_ = 0;     // the fence MCCL's copies wait for
  uint64_t lastCopy_ = 0;  // the copy event's value after this op's copies
  std::vector<MetalPort::Copy> pending_;  // queued at the next recordSide()
  // Contiguous copies of strided inputs, alive until the op's stage is
  // destroyed (after drain()).
  std::vector<at::Tensor> temps_;
};

}  // namespace

std::shared_ptr<DeviceOps> makeMpsDeviceOps(std::shared_ptr<MetalPort> port, c10::Device device) {
  return std::make_shared<MpsDeviceOps>(std::move(port), device);
}

}  // namespace mccl::torch_adapter
