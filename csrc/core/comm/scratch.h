// Reusable scratch memory for operations (receive slots, staging copies).
//
// Fresh large allocations cost page faults on every operation; the pool keeps
// released buffers (up to a cap) and hands them out again. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace mccl {

class ScratchPool;

// A buffer on loan from the pool; returns itself when destroyed.
class Scratch {
 public:
  Scratch() = default;
  Scratch(Scratch&& o) noexcept { *this = std::move(o); }
  Scratch& operator=(Scratch&& o) noexcept;
  ~Scratch() { release(); }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  void release();

 private:
  friend class ScratchPool;
  ScratchPool* pool_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class ScratchPool {
 public:
  explicit ScratchPool(size_t maxCachedBytes) : maxCached_(maxCachedBytes) {}
  ~ScratchPool();
  Scratch get(size_t bytes);

 private:
  friend class Scratch;
  void put(uint8_t* data, size_t size);

  std::mutex mu_;
  const size_t maxCached_;
  size_t cached_ = 0;
  std::multimap<size_t, uint8_t*> free_;
};

}  // namespace mccl
