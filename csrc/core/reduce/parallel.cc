#include "reduce/parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdint>

#include "util/params.h"
#include "util/thread_priority.h"

namespace mccl::kernels {

ReducePool::ReducePool(int helpers, size_t minPartBytes)
    : minPartBytes_(std::max<size_t>(1, minPartBytes)) {
  for (int i = 0; i < helpers; ++i) {
    threads_.emplace_back([this] {
      nameDataPathThread("mccl-reduce");
      loop();
    });
  }
}

ReducePool::~ReducePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReducePool::runPart(const Part& p) {
  p.fn(p.out, p.a, p.b, p.count);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --p.batch->left;
  }
  done_.notify_all();
}

void ReducePool::loop() {
  for (;;) {
    Part p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      p = queue_.front();
      queue_.pop_front();
    }
    runPart(p);
  }
}

void ReducePool::combine(CombineFn fn, void* out, const void* a, const void* b, size_t count,
                         size_t elemSize) {
  const size_t bytes = count * elemSize;
  const size_t parts =
      std::min<size_t>(threads_.size() + 1, std::max<size_t>(1, bytes / minPartBytes_));
  if (parts <= 1) {
    fn(out, a, b, count);
    return;
  }
  // Part boundaries on 64-byte multiples of the element size.
  const size_t align = std::max<size_t>(1, 64 / std::max<size_t>(1, elemSize));
  auto boundary = [&](size_t i) {
    if (i >= parts) return count;
    return std::min(count, count * i / parts / align * align);
  };
  auto part = [&](size_t i, Batch* batch) {
    const size_t begin = boundary(i), len = boundary(i + 1) - begin;
    const size_t off = begin * elemSize;
    return Part{fn, static_cast<uint8_t*>(out) + off, static_cast<const uint8_t*>(a) + off,
                static_cast<const uint8_t*>(b) + off, len, batch};
  };
  Batch batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.left = static_cast<int>(parts - 1);
    for (size_t i = 1; i < parts; ++i) queue_.push_back(part(i, &batch));
  }
  work_.notify_all();
  const Part first = part(0, &batch);
  fn(first.out, first.a, first.b, first.count);
  std::unique_lock<std::mutex> lock(mu_);
  while (batch.left > 0) {
    // Run a part of ours that no helper has taken; else wait for the helpers.
    auto mine = std::find_if(queue_.begin(), queue_.end(), [&](const Part& p) { return p.batch == &batch; });
    if (mine == queue_.end()) {
      done_.wait(lock);
      continue;
    }
    const Part p = *mine;
    queue_.erase(mine);
    lock.unlock();
    runPart(p);
    lock.lock();
  }
}

int reduceHelpersFromEnv() {
  const int64_t set = params::reduceThreads();
  if (set >= 0) return static_cast<int>(std::min<int64_t>(set, 64));
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  long local = 1;
  if (const char* s = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1L, std::strtol(s, nullptr, 10));
  const long free = static_cast<long>(hw) / local - 2;
  return static_cast<int>(std::clamp(free, 0L, 7L));
}

ReducePool& reducePool() {
  static ReducePool pool(reduceHelpersFromEnv());
  return pool;
}

Combiner combiner(DataType dtype, ReduceOp op) {
  return Combiner{combineFn(dtype, op), dtypeSize(dtype)};
}

double measureCombineNsPerByte(DataType dtype, size_t bytes) {
  const Combiner combine = combiner(dtype, ReduceOp::kSum);
  const size_t count = std::max<size_t>(1, bytes / combine.elemSize);
  std::vector<uint8_t> a(count * combine.elemSize, 0), b(a.size(), 0);
  combine(a.data(), a.data(), b.data(), count);  // fault the pages in
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    combine(a.data(), a.data(), b.data(), count);
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(a.size()));
  }
  return best;
}

}  // namespace mccl::kernels
