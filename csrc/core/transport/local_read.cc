// Same-host reads: the platform-independent part (the checked read). The
// platform's part is local_read_linux.cc with local_attest_linux.cc, or
// their twin local_read_none.cc (chosen by CMake).
#include "transport/local_read.h"

#include "util/error.h"

namespace mccl {

void PeerMemory::read(uint64_t addr, void* dst, size_t len) const {
  readPeerMemory(pid_, addr, dst, len);
  if (exited()) {
    throwError(ErrorKind::kRemote, "pid ", pid_,
               " exited while its memory was being read (its pid may be reused)");
  }
}

}  // namespace mccl
