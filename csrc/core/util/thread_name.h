// Names the calling thread (shown by top -H, gdb, py-spy and /proc), so that
// MCCL's threads are easy to tell apart from the application's. Every MCCL
// thread's name starts with "mccl-"; tests count them to prove shutdown
// joined them all.
#pragma once

#include <pthread.h>

namespace mccl {

inline void nameThisThread(const char* name) {
#if defined(__APPLE__)
  pthread_setname_np(name);
#elif defined(__linux__)
  pthread_setname_np(pthread_self(), name);  // at most 15 characters
#else
  (void)name;
#endif
}

}  // namespace mccl
