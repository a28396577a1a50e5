#include "util/thread_priority.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__APPLE__)
#include <pthread.h>
#include <pthread/qos.h>
#endif

#include "util/error.h"
#include "util/logging.h"
#include "util/params.h"

namespace mccl {

ThreadPriority parseThreadPriority(std::string_view text) {
  if (text == "normal") return ThreadPriority::kNormal;
  if (text == "latency") return ThreadPriority::kLatency;
  if (text == "high") return ThreadPriority::kHigh;
  throwError(ErrorKind::kUsage, "MCCL_THREAD_PRIORITY=", std::string(text), " is not one of normal, latency, high");
}

ThreadPriority threadPriority() {
  try {
    return parseThreadPriority(params::threadPriority());
  } catch (const Error&) {
    return ThreadPriority::kNormal;  // refused at the group's creation
  }
}

#if defined(__linux__)
namespace {

// The kernel's struct sched_attr (include/uapi/linux/sched/types.h), its
// first version's fields; declared here because newer C libraries declare
// it in <sched.h> as well.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;  // the fair class's time slice (Linux 6.12+)
  uint64_t sched_deadline;
  uint64_t sched_period;
};

int getAttr(pid_t tid, SchedAttr* a) {
  std::memset(a, 0, sizeof(*a));
  return static_cast<int>(::syscall(SYS_sched_getattr, tid, a, sizeof(*a), 0));
}

int setAttr(pid_t tid, SchedAttr* a) {
  a->size = sizeof(*a);
  a->sched_flags = 0;
  return static_cast<int>(::syscall(SYS_sched_setattr, tid, a, 0));
}

}  // namespace
#endif

PriorityOutcome setThisThreadPriority(ThreadPriority p) {
  if (p == ThreadPriority::kNormal) return {true, {}};
#if defined(__linux__)
  const auto tid = static_cast<pid_t>(::syscall(SYS_gettid));
  SchedAttr a{};
  if (getAttr(tid, &a) != 0) return {false, strCat("sched_getattr: ", std::strerror(errno))};
  if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH) {
    return {false, strCat("the thread runs under scheduling policy ", a.sched_policy,
                          ", not the fair class; left as it is")};
  }
  std::string why;
  const int nice = a.sched_nice;
  a.sched_runtime = kShortSliceNs;
  a.sched_nice = p == ThreadPriority::kHigh ? std::min(nice, kHighNice) : nice;
  if (setAttr(tid, &a) != 0) {
    const int err = errno;
    if (a.sched_nice == nice) return {false, strCat("sched_setattr: ", std::strerror(err))};
    why = strCat("nice ", kHighNice, ": ", std::strerror(err),
                 err == EACCES || err == EPERM
                     ? " (needs root, CAP_SYS_NICE or an RLIMIT_NICE of at least 30: ulimit -e 30)"
                     : "");
    a.sched_nice = nice;  // the slice alone
    if (setAttr(tid, &a) != 0) return {false, strCat(why, "; sched_setattr: ", std::strerror(errno))};
  }
  SchedAttr now{};
  if (getAttr(tid, &now) != 0 || now.sched_runtime != kShortSliceNs) {
    why = strCat(why.empty() ? "" : strCat(why, "; "), "this kernel keeps one time slice for all threads (per-thread slices: Linux 6.12+)");
  }
  return {why.empty(), why};
#elif defined(__APPLE__)
  const int rc = pthread_set_qos_class_self_np(QOS_CLASS_USER_INTERACTIVE, 0);
  if (rc == 0) return {true, {}};
  return {false, strCat("pthread_set_qos_class_self_np(user-interactive): ", std::strerror(rc))};
#else
  return {false, "no thread priorities on this platform"};
#endif
}

bool threadPriorityExplicit() {
  const char* v = std::getenv(params::spec::threadPriority.env);
  return v != nullptr && *v != '\0';
}

void prioritizeThisThread(const char* threadName) {
  const ThreadPriority p = threadPriority();
  if (p == ThreadPriority::kNormal) return;
  PriorityOutcome out = setThisThreadPriority(p);
  static std::atomic<bool> told{false};
  if (out.applied || told.exchange(true)) return;
  // Asked for: a warning. The default on a system that cannot give it (a
  // kernel before 6.12): a note at INFO, not a warning on every run.
  if (threadPriorityExplicit()) {
    MCCL_LOG(kWarn, "MCCL_THREAD_PRIORITY: ", threadName, " is not scheduled as asked: ", out.why,
             " (this warning is printed once per process)");
  } else {
    MCCL_LOG(kInfo, "MCCL_THREAD_PRIORITY (default ", params::spec::threadPriority.def, "): ", threadName,
             " keeps the kernel's scheduling: ", out.why);
  }
}

}  // namespace mccl
