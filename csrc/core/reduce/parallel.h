// Large reductions split across helper threads when the host has cores to
// spare (MCCL_REDUCE_THREADS).
//
// The kernels are element-wise, so a call cut into parts gives bit-identical
// results. The calling thread runs the first part, helpers the others; while
// it waits it runs any of its parts no helper has taken yet, so a call never
// waits on a busy pool (and a pool whose threads did not survive a fork()
// degrades to the caller doing everything).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "reduce/reduce.h"

namespace mccl::kernels {

class ReducePool {
 public:
  // `helpers` threads (0: the caller does all); parts are at least
  // `minPartBytes` long.
  explicit ReducePool(int helpers, size_t minPartBytes = kDefaultMinPartBytes);
  ~ReducePool();
  ReducePool(const ReducePool&) = delete;
  ReducePool& operator=(const ReducePool&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }
  // fn(out, a, b, count) over elements of `elemSize` bytes, in parts.
  void combine(CombineFn fn, void* out, const void* a, const void* b, size_t count,
               size_t elemSize);

  static constexpr size_t kDefaultMinPartBytes = 256 * 1024;

 private:
  struct Batch {
    int left = 0;  // parts not yet finished, guarded by the pool's mutex
  };
  struct Part {
    CombineFn fn;
    void* out;
    const void* a;
    const void* b;
    size_t count;
    Batch* batch;
  };
  void loop();
  void runPart(const Part& p);

  const size_t minPartBytes_;
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Part> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Helpers for MCCL_REDUCE_THREADS: a number, or -1 (auto): the cores this
// rank may count on (hardware threads / LOCAL_WORLD_SIZE) less two for its
// own compute and network threads, at most 7.
int reduceHelpersFromEnv();

// The process's pool, made on first use from the environment.
ReducePool& reducePool();

// A combine kernel that splits large calls across reducePool().
struct Combiner {
  CombineFn fn = nullptr;
  size_t elemSize = 1;
  void operator()(void* out, const void* a, const void* b, size_t count) const {
    reducePool().combine(fn, out, a, b, count, elemSize);
  }
};
Combiner combiner(DataType dtype, ReduceOp op);

// Measures the SUM kernel on `bytes` of `dtype` in place, through the
// process's pool (as the ring's reduce step runs it, helpers included);
// returns nanoseconds per byte of buffer. For the cost model's gamma.
double measureCombineNsPerByte(DataType dtype, size_t bytes);

}  // namespace mccl::kernels
