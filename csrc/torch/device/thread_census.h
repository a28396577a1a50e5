// Whether a process's other threads are all at rest, for the callback
// runners (callbacks.h): the kernel's view of each thread -- running or
// runnable, and CPU time used -- sampled over time (Linux: /proc/self/task;
// macOS: task_threads and THREAD_EXTENDED_INFO).
#pragma once

#include <cstdint>
#include <unordered_map>

namespace mccl::torch_adapter {

class QuietWatch {
 public:
  // Whether every thread that may use a device has been still -- not
  // running or runnable, its CPU time unchanged -- for `stillNs`, as far as
  // this watch's samples show. Skips the calling thread and threads named
  // "mccl-*" (MCCL's network, engine and completion threads, which never
  // touch a device) except the callback runners ("mccl-cb-run"). False
  // where the platform cannot tell.
  bool quiet(int64_t nowNs, int64_t stillNs);
  // Forgets what was seen: the next quiet() needs a fresh still spell.
  void reset() { seen_.clear(); }

 private:
  struct Seen {
    int64_t cpuNs = -1;
    int64_t stillSince = 0;
  };
  // Updates thread `id`'s record; true if it has been still for stillNs.
  bool still(uint64_t id, bool running, int64_t cpuNs, int64_t nowNs, int64_t stillNs);
  std::unordered_map<uint64_t, Seen> seen_;
  uint64_t lastBusy_ = 0;  // looked at first: the thread that was busy last time
};

}  // namespace mccl::torch_adapter
