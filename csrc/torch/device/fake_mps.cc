// A fake Metal port: the MPS adapter's ordering, tested on Linux
// (MCCL_FAKE_DEVICE_FOR_TESTING=mps-shared:<us> or mps-private:<us>).
//
// CPU tensors stand in for MPS tensors. PyTorch's MPS stream is the fake
// device's serial "GPU" (the fence is a value it sets when it gets there);
// MCCL's own command queue is a second serial executor whose command buffers
// first wait for their fence value, then run `delay` later. Shared mode
// exposes the tensors' memory (zero copy); private mode hides it, so every
// byte goes through the queued copies into poisoned staging buffers (pooled
// as the real port pools them). Fence calls from MCCL's threads are counted
// as violations; fences, commits and buffer allocations are counted as the
// real port counts them.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "device/fake_gpu.h"
#include "device/mps_device.h"
#include "device/staging_pool.h"

namespace mccl::torch_adapter {
namespace {

std::atomic<int64_t> gCopyBackDelayUs{-1};  // < 0: the port's own delay

class FakeMetalPort final : public MetalPort {
 public:
  FakeMetalPort(FakeGpu& torchStream, bool shared)
      : torch_(torchStream),
        own_(torchStream.delay(), "fake-mtl-queue"),
        shared_(shared),
        pool_(std::make_shared<StagingPool>(
            [](size_t bytes, void** cpu) {
              void* p = std::malloc(bytes);
              TORCH_CHECK(p != nullptr, "fake Metal port: out of memory");
              *cpu = p;
              return std::shared_ptr<void>(p, std::free);
            },
            size_t{256} << 20)) {}

  uint64_t fence() override {
    countIfMcclThread();
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t v = ++fences_;
    streamCommits_ += kFenceCommits;  // as mps_metal.mm
    torch_.enqueue([this, v] { fenceValue_.store(v); });
    return v;
  }
  uint64_t fenceValue() const override { return fenceValue_.load(); }
  void* cpuAddress(const at::Tensor& t) override { return shared_ ? t.data_ptr() : nullptr; }
  at::Tensor sharedLike(const at::Tensor& dev) override {
    at::Tensor h = pool_->tensorLike(dev);
    // A reused block must not pass for results: poisoned every time.
    if (h.numel() > 0) std::memset(h.data_ptr(), 0xA5, h.nbytes());
    return h;
  }
  uint64_t copies(const std::vector<Copy>& batch, uint64_t after) override {
    // As strict about lifetimes as Metal: a command buffer holds its
    // MTLBuffers, but not the tensors, so PyTorch's allocator may hand the
    // memory to another tensor before the blit runs. The fake holds each
    // device tensor's storage only weakly; a copy that finds it freed is
    // counted and skipped (its data was never there). The host side is
    // MCCL's staging buffer (held, as the command buffer holds it).
    struct Held {
      at::Tensor host;
      c10::weak_intrusive_ptr<c10::StorageImpl> storage;
      at::TensorOptions options;
      int64_t offset;
      std::vector<int64_t> sizes, strides;
      bool toDevice;
    };
    std::vector<Held> held;
    auto delay = own_.delay();
    for (const auto& c : batch) {
      held.push_back(Held{c.host,
                          c10::weak_intrusive_ptr<c10::StorageImpl>(
                              c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(
                                  c.dev.storage().unsafeGetStorageImpl())),
                          c.dev.options(), c.dev.storage_offset(), c.dev.sizes().vec(),
                          c.dev.strides().vec(), c.toDevice});
      if (const int64_t slow = gCopyBackDelayUs.load(); c.toDevice && slow >= 0) {
        delay = std::chrono::microseconds(slow);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);  // values in queue order
    uint64_t v = ++copies_;
    ++queueCommits_;
    own_.enqueue([this, held = std::move(held), after, v, delay]() mutable {
      while (fenceValue_.load() < after) std::this_thread::sleep_for(std::chrono::microseconds(20));
      std::this_thread::sleep_for(delay);
      for (auto& h : held) {
        c10::intrusive_ptr<c10::StorageImpl> storage = h.storage.lock();
        if (!storage) {
          countLifetimeViolation();
          continue;
        }
        at::Tensor d = at::empty({0}, h.options).set_(c10::Storage(std::move(storage)), h.offset,
                                                     h.sizes, h.strides);
        if (h.toDevice) {
          d.view(-1).copy_(h.host.reshape(-1));
        } else {
          h.host.view(-1).copy_(d.reshape(-1));
        }
      }
      held.clear();  // before the value says the copies are done
      copyValue_.store(v);
    });
    return v;
  }
  uint64_t copyValue() const override { return copyValue_.load(); }
  Stats stats() const override {
    Stats s;
    s.fences = fences_.load();
    s.streamCommits = streamCommits_.load();
    s.queueCommits = queueCommits_.load();
    s.bufferAllocations = pool_->allocations();
    return s;
  }

 private:
  FakeGpu& torch_;
  FakeGpu own_;
  const bool shared_;
  std::shared_ptr<StagingPool> pool_;
  std::mutex mu_;
  std::atomic<uint64_t> fences_{0}, fenceValue_{0}, copies_{0}, copyValue_{0};
  std::atomic<uint64_t> streamCommits_{0}, queueCommits_{0};
};

}  // namespace

void setFakeCopyBackDelay(int64_t us) { gCopyBackDelayUs.store(us); }

std::shared_ptr<MetalPort> makeFakeMetalPort(FakeGpu& torchStream, bool shared) {
  return std::make_shared<FakeMetalPort>(torchStream, shared);
}

}  // namespace mccl::torch_adapter
