// Host staging buffers for device copies, reused across ops.
//
// A Metal port stages Private MPS tensors through Shared MTLBuffers; making
// one per op (newBufferWithLength) costs a kernel call and page faults on
// every op, so they are pooled: blocks of power-of-two sizes (at least
// 64 KiB), handed out as CPU tensors whose deleter gives the block back.
// Idle blocks beyond `idleCapBytes` are freed. The blocks' memory is found
// again by address (find()) when a copy names a tensor in it.
//
// Portable: the allocation itself is a callback (an MTLBuffer on macOS; heap
// memory in the fake port, which tests count).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace mccl::torch_adapter {

class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  // Allocates `bytes`; returns an owning handle (freed when released) and
  // sets `*cpu` to the memory's CPU address. Throws on failure.
  using Alloc = std::function<std::shared_ptr<void>(size_t bytes, void** cpu)>;

  StagingPool(Alloc alloc, size_t idleCapBytes) : alloc_(std::move(alloc)), idleCap_(idleCapBytes) {}

  // A contiguous CPU tensor shaped like `like` (sizes, dtype) in a pooled
  // block. Its contents are whatever the block held.
  at::Tensor tensorLike(const at::Tensor& like);
  // The block holding [p, p + bytes): its handle and the offset of p in it.
  bool find(const void* p, size_t bytes, std::shared_ptr<void>* handle, size_t* offset);

  // Blocks allocated so far (not reuses), and idle bytes now.
  uint64_t allocations() const;
  size_t idleBytes() const;
  static size_t blockBytes(size_t bytes);

 private:
  struct Block {
    std::shared_ptr<void> handle;
    void* cpu = nullptr;
    size_t bytes = 0;
  };
  void giveBack(void* cpu);

  Alloc alloc_;
  const size_t idleCap_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Block> live_;                    // every block, by address
  std::multimap<size_t, uintptr_t> idle_;              // idle blocks by size
  size_t idleBytes_ = 0;
  uint64_t allocations_ = 0;
};

}  // namespace mccl::torch_adapter
