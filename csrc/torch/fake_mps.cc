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
    return copy(shared, dev, after, /*toDevice=*/false);
  }
  uint64_t copyIn(const at::Tensor& dev, const at::Tensor& src, uint64_t after) override {
    return copy(src, dev, after, /*toDevice=*/true);
  }
  uint64_t copyValue() const override { return copyValue_.load(); }

 private:
  // As strict about lifetimes as Metal: a blit holds its MTLBuffer, but not
  // the tensor, so PyTorch's allocator may hand the memory to another tensor
  // before the blit runs. The fake holds the device tensor's storage only
  // weakly; a copy that finds it freed is counted and skipped (its data was
  // never there). The host side is MCCL's own staging buffer.
  uint64_t copy(at::Tensor host, const at::Tensor& dev, uint64_t after, bool toDevice) {
    std::lock_guard<std::mutex> lock(mu_);  // values in queue order
    uint64_t v = ++copies_;
    auto delay = own_.delay();
    c10::weak_intrusive_ptr<c10::StorageImpl> weak(
        c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(dev.storage().unsafeGetStorageImpl()));
    const auto options = dev.options();
    const auto offset = dev.storage_offset();
    const std::vector<int64_t> sizes = dev.sizes().vec(), strides = dev.strides().vec();
    own_.enqueue([this, host, weak, options, offset, sizes, strides, after, v, toDevice,
                  delay]() mutable {
      while (fenceValue_.load() < after) std::this_thread::sleep_for(std::chrono::microseconds(20));
      std::this_thread::sleep_for(delay);
      c10::intrusive_ptr<c10::StorageImpl> storage = weak.lock();
      if (!storage) {
        countLifetimeViolation();
      } else {
        at::Tensor d = at::empty({0}, options).set_(c10::Storage(std::move(storage)), offset, sizes, strides);
        if (toDevice) {
          d.view(-1).copy_(host.reshape(-1));
        } else {
          host.view(-1).copy_(d.reshape(-1));
        }
      }
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
