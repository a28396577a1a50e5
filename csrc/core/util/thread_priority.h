// MCCL_THREAD_PRIORITY: how the threads on MCCL's data path (receive, send,
// engine, reduction helpers, Future marks, device staging) are scheduled
// against the application's threads on a host whose cores are busy (data
// loaders, other processes, many ranks on one machine), where a thread that
// a frame wakes may otherwise wait for the running thread's time slice to
// end before it can forward the data:
//   normal   left as created.
//   latency  (the default) Linux 6.12 and later: a short time slice (0.1 ms, sched_attr's
//            sched_runtime for a fair-class thread), so the woken thread
//            preempts a busy core's thread at once; its share of CPU time
//            stays the same, and no privilege is needed. Older kernels
//            ignore the slice (a warning where the setting was given, a
//            line at INFO for the default). macOS: the quality-of-service
//            class user-interactive.
//   high     latency, and on Linux nice -10 as well (a larger share of CPU
//            time), which needs root, CAP_SYS_NICE or an RLIMIT_NICE of at
//            least 30 (ulimit -e 30); where refused, one warning and the
//            slice alone.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/thread_name.h"

namespace mccl {

enum class ThreadPriority { kNormal, kLatency, kHigh };

// "normal", "latency" or "high"; anything else is a usage error naming the
// variable.
ThreadPriority parseThreadPriority(std::string_view text);

// The process's MCCL_THREAD_PRIORITY (read from the environment each call;
// a group's creation has already refused a malformed value).
ThreadPriority threadPriority();

// What setting the calling thread did: everything asked for, or why not.
struct PriorityOutcome {
  bool applied = false;
  std::string why;  // empty when applied
};

// Sets the calling thread to `p` (kNormal: nothing, applied). The platform's
// calls; no logging.
PriorityOutcome setThisThreadPriority(ThreadPriority p);

// Whether MCCL_THREAD_PRIORITY is set (not empty) in the environment.
bool threadPriorityExplicit();

// For MCCL's data-path threads at their start: applies threadPriority() and,
// the first time something is refused in this process, says so naming the
// thread and the reason: a warning where the setting was given, a line at
// INFO where it is the default (so a kernel before 6.12 runs quietly).
void prioritizeThisThread(const char* threadName);

// The first call of a data-path thread: names it (thread_name.h) and
// schedules it as above.
inline void nameDataPathThread(const char* name) {
  nameThisThread(name);
  prioritizeThisThread(name);
}

// The Linux nice value that "high" sets, and the slice "latency" asks for.
inline constexpr int kHighNice = -10;
inline constexpr uint64_t kShortSliceNs = 100000;

}  // namespace mccl
