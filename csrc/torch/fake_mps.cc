// A fake Metal port: the MPS adapter's ordering, tested on Linux
// (MCCL_FAKE_DEVICE_FOR_TESTING=mps-shared:<us> or mps-private:<us>).
//
// CPU tensors stand in for MPS tensors. PyTorch's MPS stream is the fake
// device's serial "GPU" (the fence is a value it sets when it gets there);
// MCCL's own command queue is a second serial executor whose copies first
// wait for their fence value, then run `delay` later. Shared mode exposes the
// tensors' memory (zero copy); private mode hides it, so every byte goes
// through the queued copies into poisoned buffers. Fence calls from MCCL's
// threads are counted as violations.
#include <atomic>
#include <mutex>

#include "fake_gpu.h"
#include "mps_device.h"

namespace mccl::torch_adapter {
namespace {

class FakeMetalPort final : public MetalPort {
 public:
  FakeMetalPort(FakeGpu& torchStream, bool shared)
      : torch_(torchStream), own_(torchStream.delay(), "fake-mtl-queue"), shared_(shared) {}

  uint64_t fence() override {
    countIfMcclThread();
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t v = ++fences_;
    torch_.enqueue([this, v] { fenceValue_.store(v); });
    return v;
  }
  uint64_t fenceValue() const override { return fenceValue_.load(); }
  void* cpuAddress(const at::Tensor& t) override { return shared_ ? t.data_ptr() : nullptr; }
  at::Tensor sharedLike(const at::Tensor& dev) override { return poisoned(dev); }
  uint64_t copyOut(const at::Tensor& shared, const at::Tensor& dev, uint64_t after) override {
    return copy(shared, dev, after);
  }
  uint64_t copyIn(const at::Tensor& dev, const at::Tensor& src, uint64_t after) override {
    return copy(dev, src, after);
  }
  uint64_t copyValue() const override { return copyValue_.load(); }

 private:
  uint64_t copy(at::Tensor dst, at::Tensor src, uint64_t after) {
    std::lock_guard<std::mutex> lock(mu_);  // values in queue order
    uint64_t v = ++copies_;
    auto delay = own_.delay();
    own_.enqueue([this, dst, src, after, v, delay]() mutable {
      while (fenceValue_.load() < after) std::this_thread::sleep_for(std::chrono::microseconds(20));
      std::this_thread::sleep_for(delay);
      dst.view(-1).copy_(src.reshape(-1));
      copyValue_.store(v);
    });
    return v;
  }

  FakeGpu& torch_;
  FakeGpu own_;
  const bool shared_;
  std::mutex mu_;
  std::atomic<uint64_t> fences_{0}, fenceValue_{0}, copies_{0}, copyValue_{0};
};

}  // namespace

std::shared_ptr<MetalPort> makeFakeMetalPort(FakeGpu& torchStream, bool shared) {
  return std::make_shared<FakeMetalPort>(torchStream, shared);
}

}  // namespace mccl::torch_adapter
