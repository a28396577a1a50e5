#include "device/thread_census.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__APPLE__)
#include <mach/mach.h>
#elif defined(__linux__)
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mccl::torch_adapter {

namespace {

// Threads whose state says nothing about device use: MCCL's own, but for
// the callback runners, which run user code.
bool skipped(const char* name) {
  return std::strncmp(name, "mccl-", 5) == 0 && std::strncmp(name, "mccl-cb-run", 11) != 0;
}

struct Sample {
  uint64_t id = 0;
  bool running = false;
  int64_t cpuNs = 0;
};

#if defined(__linux__)
bool readFile(const std::string& path, char* buf, size_t size) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  size_t n = std::fread(buf, 1, size - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  return n > 0;
}

// One thread: false when it is gone, skipped, or unreadable.
bool sampleThread(long tid, Sample* s) {
  const std::string dir = "/proc/self/task/" + std::to_string(tid);
  char buf[1024];
  if (!readFile(dir + "/stat", buf, sizeof(buf))) return false;
  // "tid (comm) S ...": comm may hold spaces and parentheses.
  char* open = std::strchr(buf, '(');
  char* close = std::strrchr(buf, ')');
  if (open == nullptr || close == nullptr || close < open || close[1] == '\0' || close[2] == '\0') return false;
  *close = '\0';
  if (skipped(open + 1)) return false;
  s->id = static_cast<uint64_t>(tid);
  s->running = close[2] == 'R';
  char sched[128];
  if (!readFile(dir + "/schedstat", sched, sizeof(sched))) {
    s->running = true;  // a thread that cannot be read is never taken for still
    s->cpuNs = 0;
    return true;
  }
  s->cpuNs = std::strtoll(sched, nullptr, 10);  // ns on the CPU, first field
  return true;
}

bool sampleAll(std::vector<Sample>* out, uint64_t first, bool* firstBusy) {
  const long self = ::syscall(SYS_gettid);
  Sample s;
  *firstBusy = false;
  if (first != 0 && static_cast<long>(first) != self && sampleThread(static_cast<long>(first), &s)) {
    out->push_back(s);
    if (s.running) {
      *firstBusy = true;
      return true;
    }
  }
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return false;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || tid == self || static_cast<uint64_t>(tid) == first) continue;
    if (sampleThread(tid, &s)) out->push_back(s);
  }
  closedir(d);
  return true;
}
#elif defined(__APPLE__)
bool sampleAll(std::vector<Sample>* out, uint64_t, bool* firstBusy) {
  *firstBusy = false;
  thread_act_array_t threads = nullptr;
  mach_msg_type_number_t count = 0;
  if (task_threads(mach_task_self(), &threads, &count) != KERN_SUCCESS) return false;
  mach_port_t self = mach_thread_self();
  for (mach_msg_type_number_t i = 0; i < count; ++i) {
    thread_extended_info_data_t info;
    mach_msg_type_number_t n = THREAD_EXTENDED_INFO_COUNT;
    if (threads[i] != self) {
      Sample s;
      s.id = threads[i];
      s.running = true;  // a thread that cannot be read is never taken for still
      if (thread_info(threads[i], THREAD_EXTENDED_INFO, reinterpret_cast<thread_info_t>(&info), &n) ==
          KERN_SUCCESS) {
        s.running = info.pth_run_state == TH_STATE_RUNNING;
        s.cpuNs = static_cast<int64_t>(info.pth_user_time + info.pth_system_time);
        if (skipped(info.pth_name)) s.id = 0;
      }
      if (s.id != 0) out->push_back(s);
    }
    mach_port_deallocate(mach_task_self(), threads[i]);
  }
  mach_port_deallocate(mach_task_self(), self);
  vm_deallocate(mach_task_self(), reinterpret_cast<vm_address_t>(threads), count * sizeof(thread_act_t));
  return true;
}
#else
bool sampleAll(std::vector<Sample>*, uint64_t, bool*) { return false; }
#endif

}  // namespace

bool QuietWatch::still(uint64_t id, bool running, int64_t cpuNs, int64_t nowNs, int64_t stillNs) {
  Seen& seen = seen_[id];
  if (running || cpuNs != seen.cpuNs) {
    seen.cpuNs = cpuNs;
    seen.stillSince = running ? 0 : nowNs;
    return false;
  }
  if (seen.stillSince == 0) seen.stillSince = nowNs;
  return nowNs - seen.stillSince >= stillNs;
}

bool QuietWatch::quiet(int64_t nowNs, int64_t stillNs) {
  std::vector<Sample> samples;
  bool firstBusy = false;
  if (!sampleAll(&samples, lastBusy_, &firstBusy)) return false;
  bool all = !firstBusy;
  std::unordered_map<uint64_t, Seen> kept;
  for (const Sample& s : samples) {
    if (!still(s.id, s.running, s.cpuNs, nowNs, stillNs)) {
      if (all) lastBusy_ = s.id;
      all = false;
    }
    if (!firstBusy) kept[s.id] = seen_[s.id];
  }
  if (!firstBusy) seen_.swap(kept);  // threads that ended are forgotten
  return all;
}

}  // namespace mccl::torch_adapter
