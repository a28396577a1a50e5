#include "comm/scratch.h"

#include <cstdlib>
#include <new>

namespace mccl {

Scratch& Scratch::operator=(Scratch&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    data_ = o.data_;
    size_ = o.size_;
    o.pool_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void Scratch::release() {
  if (data_ != nullptr) pool_->put(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

ScratchPool::~ScratchPool() {
  for (auto& [size, p] : free_) std::free(p);
}

Scratch ScratchPool::get(size_t bytes) {
  Scratch s;
  s.pool_ = this;
  if (bytes == 0) bytes = 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.lower_bound(bytes);
    // Reuse a cached buffer unless it is much larger than needed.
    if (it != free_.end() && it->first <= 2 * bytes + 4096) {
      s.size_ = it->first;
      s.data_ = it->second;
      cached_ -= it->first;
      free_.erase(it);
      return s;
    }
  }
  s.data_ = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (s.data_ == nullptr) throw std::bad_alloc();
  s.size_ = bytes;
  return s;
}

void ScratchPool::put(uint8_t* data, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_ + size > maxCached_) {
    std::free(data);
    return;
  }
  free_.emplace(size, data);
  cached_ += size;
}

}  // namespace mccl
