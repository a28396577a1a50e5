// MCCL_THREAD_PRIORITY: strict parsing, the platform calls on a thread of
// their own, and a communicator's data-path threads set while its
// application threads are left alone. Nice values are read with
// getpriority(2) and time slices from /proc/self/task/TID/sched; whether
// the kernel allows them is judged from the kernel's own rules.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <barrier>
#include <cstdio>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "harness.h"
#include "scoped_env.h"
#include "util/error.h"
#include "util/params.h"
#include "util/thread_priority.h"

namespace mccl {
namespace {

using test::ScopedEnv;

int niceOf(long tid) {
  errno = 0;
  int n = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  EXPECT_EQ(errno, 0) << "getpriority(" << tid << ")";
  return n;
}

long thisTid() { return ::syscall(SYS_gettid); }

// A thread's time slice in ns (the "se.slice" line of its sched file).
uint64_t sliceOf(long tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/sched");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("se.slice", 0) == 0) return std::stoull(line.substr(line.find(':') + 1));
  }
  ADD_FAILURE() << "no se.slice for thread " << tid;
  return 0;
}

// Per-thread slices of the fair class came with Linux 6.12.
bool kernelHasSlices() {
  utsname u{};
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  return major > 6 || (major == 6 && minor >= 12);
}

// Whether this process may lower a thread's nice value to kHighNice, found
// from the kernel's own rules, not by asking the code under test: the
// effective capability CAP_SYS_NICE (bit 23) or RLIMIT_NICE.
bool mayRaise() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
      if (caps & (uint64_t{1} << 23)) return true;
    }
  }
  rlimit rl{};
  if (::getrlimit(RLIMIT_NICE, &rl) != 0) return false;
  return rl.rlim_cur == RLIM_INFINITY || 20 - static_cast<long>(rl.rlim_cur) <= kHighNice;
}

struct Sched {
  int nice;
  uint64_t slice;
};

// name -> nice value and slice of this process's threads of that name.
std::multimap<std::string, Sched> threadScheds() {
  std::multimap<std::string, Sched> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    if (!std::getline(comm, name)) continue;  // ended meanwhile
    errno = 0;
    const long tid = std::stol(e.path().filename().string());
    int n = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno == 0) out.emplace(name, Sched{n, sliceOf(tid)});
  }
  return out;
}

TEST(ThreadPriority, ParsesOnlyTheThreeNames) {
  EXPECT_EQ(parseThreadPriority("normal"), ThreadPriority::kNormal);
  EXPECT_EQ(parseThreadPriority("latency"), ThreadPriority::kLatency);
  EXPECT_EQ(parseThreadPriority("high"), ThreadPriority::kHigh);
  for (const char* bad : {"", "High", "hi", "normal ", "-10", "realtime", "low-latency"}) {
    try {
      parseThreadPriority(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      EXPECT_NE(std::string(e.what()).find(std::string("MCCL_THREAD_PRIORITY=") + bad + " is not one of normal, latency, high"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ThreadPriority, OnlyAGivenSettingWarnsWhereRefused) {
  {
    ScopedEnv env("MCCL_THREAD_PRIORITY", "latency");
    EXPECT_TRUE(threadPriorityExplicit());
    EXPECT_EQ(threadPriority(), ThreadPriority::kLatency);
  }
  {
    ScopedEnv env("MCCL_THREAD_PRIORITY", "");  // empty: the default, as if unset
    EXPECT_FALSE(threadPriorityExplicit());
    EXPECT_EQ(threadPriority(), parseThreadPriority(params::spec::threadPriority.def));
  }
}

TEST(ThreadPriority, MalformedSettingFailsAtInit) {
  ScopedEnv env("MCCL_THREAD_PRIORITY", "urgent");
  try {
    CommConfig::fromEnv(0, 2);
    ADD_FAILURE() << "MCCL_THREAD_PRIORITY=urgent was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MCCL_THREAD_PRIORITY=urgent is not one of normal, latency, high"),
              std::string::npos)
        << e.what();
  }
}

// Runs setThisThreadPriority(p) on a new thread; its outcome and the
// thread's nice value and slice just after.
struct Result {
  PriorityOutcome out;
  int nice = 1000;
  uint64_t slice = 0;
};
Result onNewThread(ThreadPriority p) {
  Result r;
  std::thread([&] {
    r.out = setThisThreadPriority(p);
    r.nice = niceOf(thisTid());
    r.slice = sliceOf(thisTid());
  }).join();
  return r;
}

TEST(ThreadPriority, LatencyShortensTheSliceOnlyOrSaysWhyNot) {
  const int before = niceOf(thisTid());
  const uint64_t slice = sliceOf(thisTid());
  Result r = onNewThread(ThreadPriority::kLatency);
  EXPECT_EQ(r.nice, before) << "latency keeps the share of CPU time";
  if (kernelHasSlices()) {
    EXPECT_TRUE(r.out.applied) << r.out.why;
    EXPECT_EQ(r.slice, kShortSliceNs);
    EXPECT_NE(slice, kShortSliceNs) << "the test needs a default slice other than the short one";
  } else {
    EXPECT_FALSE(r.out.applied);
    EXPECT_NE(r.out.why.find("Linux 6.12"), std::string::npos) << r.out.why;
  }
  EXPECT_EQ(niceOf(thisTid()), before);
  EXPECT_EQ(sliceOf(thisTid()), slice) << "the calling thread's neighbours keep theirs";
}

TEST(ThreadPriority, HighRaisesOnlyTheCallingThreadOrSaysWhyNot) {
  const int before = niceOf(thisTid());
  Result r = onNewThread(ThreadPriority::kHigh);
  if (mayRaise()) {
    EXPECT_EQ(r.nice, kHighNice);
  } else {
    EXPECT_FALSE(r.out.applied);
    EXPECT_NE(r.out.why.find("CAP_SYS_NICE"), std::string::npos) << r.out.why;
    EXPECT_EQ(r.nice, before);
  }
  if (kernelHasSlices()) {
    EXPECT_EQ(r.slice, kShortSliceNs) << "the slice is set even where nice is refused";
  }
  EXPECT_EQ(r.out.applied, mayRaise() && kernelHasSlices()) << r.out.why;
  EXPECT_EQ(niceOf(thisTid()), before) << "the calling thread's neighbours keep theirs";
}

TEST(ThreadPriority, NormalLeavesTheThreadAsCreated) {
  const int before = niceOf(thisTid());
  const uint64_t slice = sliceOf(thisTid());
  Result r = onNewThread(ThreadPriority::kNormal);
  EXPECT_TRUE(r.out.applied);
  EXPECT_EQ(r.nice, before);
  EXPECT_EQ(r.slice, slice);
}

// Three ranks with MCCL_THREAD_PRIORITY=high: while the groups are up, every
// receive, send and engine thread runs at kHighNice with the short slice
// (where the process may raise threads and the kernel has slices), and the
// ranks' own threads keep the process's values.
TEST(ThreadPriority, HighRaisesACommunicatorsDataPathThreads) {
  if (!mayRaise() || !kernelHasSlices()) {
    GTEST_SKIP() << "needs CAP_SYS_NICE or RLIMIT_NICE, and Linux 6.12+ (the other cases: the tests above)";
  }
  ScopedEnv env("MCCL_THREAD_PRIORITY", "high");
  const int base = niceOf(thisTid());
  std::barrier sync(3);
  const uint64_t baseSlice = sliceOf(thisTid());
  std::vector<Sched> rankSched(3, Sched{1000, 0});
  std::multimap<std::string, Sched> seen;
  test::runRanks(3, [&](Communicator& comm) {
    float v = static_cast<float>(comm.rank() + 1);
    AllreduceOptions o;
    o.buf = &v;
    o.count = 1;
    o.dtype = DataType::kFloat32;
    o.op = ReduceOp::kSum;
    allreduce(comm, o)->wait();
    EXPECT_EQ(v, 6.0f) << "rank " << comm.rank();
    rankSched[static_cast<size_t>(comm.rank())] = Sched{niceOf(thisTid()), sliceOf(thisTid())};
    sync.arrive_and_wait();  // every group is up with its connections
    if (comm.rank() == 0) seen = threadScheds();
    sync.arrive_and_wait();
  });
  for (const Sched& s : rankSched) {
    EXPECT_EQ(s.nice, base) << "a rank's own thread was changed";
    EXPECT_EQ(s.slice, baseSlice) << "a rank's own thread was changed";
  }
  int counted = 0;
  for (const char* name : {"mccl-recv", "mccl-send", "mccl-engine"}) {
    auto [lo, hi] = seen.equal_range(name);
    EXPECT_NE(lo, hi) << "no " << name << " thread while three groups were up";
    for (auto it = lo; it != hi; ++it, ++counted) {
      EXPECT_EQ(it->second.nice, kHighNice) << name;
      EXPECT_EQ(it->second.slice, kShortSliceNs) << name;
    }
  }
  // 3 engines; each rank's connections to the two others, a receive and a
  // send thread each.
  EXPECT_GE(counted, 3 + 3 * 2 * 2);
}

}  // namespace
}  // namespace mccl
