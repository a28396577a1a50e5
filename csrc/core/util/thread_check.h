// Thread affinity, asserted (in the manner of TensorPipe's ...FromLoop
// checks): a method that must run on one thread says so with
// MCCL_ASSERT_ON(owner), where `owner` is the ThreadOwner bound by that
// thread when it starts; a method that must never run there (it would join
// or wait for that thread) says MCCL_ASSERT_OFF(owner).
//
// Checked in debug builds and in the test build (MCCL_THREAD_CHECKS); a
// violation prints where and aborts. Free elsewhere.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace mccl {

class ThreadOwner {
 public:
  explicit ThreadOwner(const char* name) : name_(name) {}
  // Called by the owning thread first thing.
  void bindToThisThread() { id_.store(std::this_thread::get_id()); }
  bool onOwner() const { return id_.load() == std::this_thread::get_id(); }
  const char* name() const { return name_; }

 private:
  const char* name_;
  std::atomic<std::thread::id> id_{};
};

[[noreturn]] inline void threadCheckFailed(const char* file, int line, const char* what,
                                           const char* owner) {
  std::fprintf(stderr, "%s:%d: thread check failed: %s the %s thread\n", file, line, what, owner);
  std::abort();
}

}  // namespace mccl

#if !defined(NDEBUG) || defined(MCCL_THREAD_CHECKS)
#define MCCL_ASSERT_ON(owner)                                                          \
  do {                                                                                 \
    if (!(owner).onOwner()) ::mccl::threadCheckFailed(__FILE__, __LINE__, "must run on", (owner).name()); \
  } while (0)
#define MCCL_ASSERT_OFF(owner)                                                         \
  do {                                                                                 \
    if ((owner).onOwner()) ::mccl::threadCheckFailed(__FILE__, __LINE__, "must not run on", (owner).name()); \
  } while (0)
#else
#define MCCL_ASSERT_ON(owner) ((void)0)
#define MCCL_ASSERT_OFF(owner) ((void)0)
#endif
