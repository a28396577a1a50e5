#include "util/trace.h"

#include <fcntl.h>
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
#include "util/logging.h"
#include "util/params.h"

namespace mccl::trace {
namespace {

struct Event {
  uint64_t t;
  uint64_t group, seq;
  int32_t who, tid;
  uint32_t slot;
  Ev ev;
  std::atomic<uint8_t> written;  // set (release) once the fields above are
};
static_assert(sizeof(Event) == 40, "MCCL_TRACE_DIR's documented memory: 40 bytes an event");

// MCCL_TRACE_DIR as the process had it when the library loaded (read once).
const std::string& loadTimeDir() {
  static const std::string d = params::traceDir();
  return d;
}

struct Buffer {
  // Value-initialised: every `written` flag starts clear.
  std::unique_ptr<Event[]> events{loadTimeDir().empty() ? nullptr : new Event[kTraceCapacity]()};
  std::atomic<size_t> next{0};
  std::atomic<bool> stopped{false};
  void dump();
};

// Never destroyed (threads of groups that were not shut down may still
// record while the process exits); written out by an exit handler, after
// which nothing more is recorded.
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

// A file of its own: mccl-trace-<pid>.txt, or with a suffix when that
// name is taken (a reused pid, ranks of other PID namespaces).
FILE* createFile(const std::string& dir, std::string* path) {
  const std::string base = dir + "/mccl-trace-" + std::to_string(::getpid());
  for (int i = 0; i < 100; ++i) {
    *path = i == 0 ? base + ".txt" : base + "-" + std::to_string(i) + ".txt";
    const int fd = ::open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return ::fdopen(fd, "w");
    if (errno != EEXIST) return nullptr;
  }
  return nullptr;
}

void Buffer::dump() {
  if (!events || stopped.exchange(true)) return;
  std::string path;
  FILE* f = createFile(loadTimeDir(), &path);
  if (!f) {
    MCCL_LOG(kWarn, "MCCL_TRACE_DIR: cannot write ", path, ": ", std::strerror(errno),
             "; this process's events are lost");
    return;
  }
  const size_t taken = next.load();
  const size_t n = taken < kTraceCapacity ? taken : kTraceCapacity;
  size_t unwritten = 0;  // claimed by a thread that had not finished writing
  for (size_t i = 0; i < n; ++i) unwritten += events[i].written.load(std::memory_order_acquire) ? 0 : 1;
  std::fprintf(f, "# mccl trace 1 pid=%d events=%zu dropped=%zu\n", static_cast<int>(::getpid()),
               n - unwritten, taken - n + unwritten);
  std::fprintf(f, "# t_ns event who group seq slot tid\n");
  for (size_t i = 0; i < n; ++i) {
    const Event& e = events[i];
    if (!e.written.load(std::memory_order_acquire)) continue;
    std::fprintf(f, "%llu %s %d %llu %llu %u %d\n", static_cast<unsigned long long>(e.t), name(e.ev), e.who,
                 static_cast<unsigned long long>(e.group), static_cast<unsigned long long>(e.seq), e.slot, e.tid);
  }
  if (std::fclose(f) != 0) {
    MCCL_LOG(kWarn, "MCCL_TRACE_DIR: writing ", path, " failed: ", std::strerror(errno));
  }
}

}  // namespace

const bool gOn = !loadTimeDir().empty();

void recordSlow(Ev e, int who, uint64_t group, uint64_t seq, uint32_t slot) {
  Buffer& b = buffer();
  if (!b.events || b.stopped.load(std::memory_order_relaxed)) return;
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const size_t i = b.next.fetch_add(1, std::memory_order_relaxed);
  if (i >= kTraceCapacity) return;
  Event& out = b.events[i];
  out.t = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  out.group = group;
  out.seq = seq;
  out.who = who;
  out.tid = threadId();
  out.slot = slot;
  out.ev = e;
  out.written.store(1, std::memory_order_release);
}

void checkDir(const std::string& dir) {
  MCCL_USAGE_CHECK(dir == loadTimeDir(), "MCCL_TRACE_DIR=", dir, " was set after MCCL was loaded (",
                   loadTimeDir().empty() ? std::string("unset then") : "'" + loadTimeDir() + "' then",
                   "); it is read once, when the library loads: set it before importing mccl");
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
