#include "device/staging_pool.h"

#include <bit>

namespace mccl::torch_adapter {

size_t StagingPool::blockBytes(size_t bytes) {
  constexpr size_t kMin = size_t{64} << 10;
  return std::bit_ceil(std::max(bytes, kMin));
}

at::Tensor StagingPool::tensorLike(const at::Tensor& like) {
  auto cpuOptions = like.options().device(at::kCPU);
  if (like.numel() == 0) return at::empty(like.sizes(), cpuOptions);
  const size_t want = blockBytes(like.nbytes());
  void* cpu = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = idle_.find(want); it != idle_.end()) {
      cpu = reinterpret_cast<void*>(it->second);
      idle_.erase(it);
      idleBytes_ -= want;
    }
  }
  if (cpu == nullptr) {
    Block b;
    b.bytes = want;
    b.handle = alloc_(want, &b.cpu);
    cpu = b.cpu;
    std::lock_guard<std::mutex> lock(mu_);
    live_[reinterpret_cast<uintptr_t>(cpu)] = std::move(b);
    ++allocations_;
  }
  // The deleter may run on any thread, after the pool's owner is gone: it
  // holds the pool.
  std::weak_ptr<StagingPool> pool = weak_from_this();
  return at::from_blob(
      cpu, like.sizes(),
      [pool](void* p) {
        if (auto self = pool.lock()) self->giveBack(p);
      },
      cpuOptions);
}

void StagingPool::giveBack(void* cpu) {
  std::shared_ptr<void> drop;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(cpu));
  if (it == live_.end()) return;
  if (idleBytes_ + it->second.bytes > idleCap_) {
    drop = std::move(it->second.handle);
    live_.erase(it);
    return;
  }
  idle_.emplace(it->second.bytes, it->first);
  idleBytes_ += it->second.bytes;
}

bool StagingPool::find(const void* p, size_t bytes, std::shared_ptr<void>* handle, size_t* offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) return false;
  --it;
  if (a + bytes > it->first + it->second.bytes) return false;
  *handle = it->second.handle;
  *offset = a - it->first;
  return true;
}

uint64_t StagingPool::allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_;
}

size_t StagingPool::idleBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idleBytes_;
}

}  // namespace mccl::torch_adapter
