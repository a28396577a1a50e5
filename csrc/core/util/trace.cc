#include "util/trace.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>

#include "util/check.h"
#include "util/error.h"

namespace mccl::trace {
namespace {

struct Event {
  uint64_t t;
  uint64_t group, seq;
  int32_t who, tid;
  uint32_t slot;
  Ev ev;
};
static_assert(sizeof(Event) == 40, "MCCL_TRACE_DIR's documented memory: 40 bytes an event");

std::string dirFromEnv() {
  const char* d = std::getenv("MCCL_TRACE_DIR");
  return d ? d : "";
}

struct Buffer {
  const std::string dir = dirFromEnv();
  std::unique_ptr<Event[]> events{dir.empty() ? nullptr : new Event[kTraceCapacity]};
  std::atomic<size_t> next{0};
  std::mutex dumpMu;
  bool dump();
};

// Never destroyed (threads of groups that were not shut down may still
// record while the process exits); written out by an exit handler.
Buffer& buffer() {
  static Buffer* b = [] {
    auto* made = new Buffer;
    if (made->events) std::atexit([] { buffer().dump(); });
    return made;
  }();
  return *b;
}

int threadId() {
  static thread_local int tid = static_cast<int>(::syscall(SYS_gettid));
  return tid;
}

bool Buffer::dump() {
  if (!events) return false;
  std::lock_guard<std::mutex> lock(dumpMu);
  const std::string path = dir + "/mccl-trace-" + std::to_string(::getpid()) + ".txt";
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const size_t taken = next.load();
  const size_t n = taken < kTraceCapacity ? taken : kTraceCapacity;
  std::fprintf(f, "# mccl trace 1 pid=%d events=%zu dropped=%zu\n", static_cast<int>(::getpid()), n,
               taken - n);
  std::fprintf(f, "# t_ns event who group seq slot tid\n");
  for (size_t i = 0; i < n; ++i) {
    const Event& e = events[i];
    std::fprintf(f, "%llu %s %d %llu %llu %u %d\n", static_cast<unsigned long long>(e.t), name(e.ev), e.who,
                 static_cast<unsigned long long>(e.group), static_cast<unsigned long long>(e.seq), e.slot, e.tid);
  }
  return std::fclose(f) == 0;
}

}  // namespace

const bool gOn = !dirFromEnv().empty();

void recordSlow(Ev e, int who, uint64_t group, uint64_t seq, uint32_t slot) {
  Buffer& b = buffer();
  if (!b.events) return;
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const size_t i = b.next.fetch_add(1, std::memory_order_relaxed);
  if (i >= kTraceCapacity) return;
  b.events[i] = Event{static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec),
                      group, seq, who, threadId(), slot, e};
}

void checkDir(const std::string& dir) {
  if (dir.empty()) return;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    throwError(ErrorKind::kUsage, "MCCL_TRACE_DIR=", dir, ": ", std::strerror(errno));
  }
  MCCL_USAGE_CHECK(S_ISDIR(st.st_mode), "MCCL_TRACE_DIR=", dir, " is not a directory");
  MCCL_USAGE_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "MCCL_TRACE_DIR=", dir,
                   " is a directory this process cannot write to");
}

const char* name(Ev e) {
  switch (e) {
    case Ev::kOpStart: return "op_start";
    case Ev::kOpEnd: return "op_end";
    case Ev::kRoundPosted: return "round_posted";
    case Ev::kRoundSent: return "round_sent";
    case Ev::kRoundResumed: return "round_resumed";
    case Ev::kFrameRead: return "frame_read";
    case Ev::kWorkDone: return "work_done";
    case Ev::kWaitReturned: return "wait_returned";
    case Ev::kCallEntered: return "call_entered";
    case Ev::kSubmitted: return "submitted";
  }
  return "unknown";
}

}  // namespace mccl::trace
