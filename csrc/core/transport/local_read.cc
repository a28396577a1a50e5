// Same-host reads: the platform-independent part (the LOCAL_HELLO wire
// format, the checked read). The platform's part is local_read_linux.cc or
// its twin local_read_none.cc (chosen by CMake).
#include "transport/local_read.h"

#include <cstring>

#include "util/bytes.h"
#include "util/error.h"

namespace mccl {

void encodeLocalHello(const LocalIdentity& id, uint8_t out[kLocalHelloBytes]) {
  std::memcpy(out, id.bootId.data(), 16);
  putLE<uint64_t>(out + 16, id.netNs);
  putLE<uint32_t>(out + 24, id.pid);
  putLE<uint64_t>(out + 28, id.cookieAddr);
  std::memcpy(out + 36, id.cookie.data(), 16);
}

LocalIdentity decodeLocalHello(const uint8_t in[kLocalHelloBytes]) {
  LocalIdentity id;
  std::memcpy(id.bootId.data(), in, 16);
  id.netNs = getLE<uint64_t>(in + 16);
  id.pid = getLE<uint32_t>(in + 24);
  id.cookieAddr = getLE<uint64_t>(in + 28);
  std::memcpy(id.cookie.data(), in + 36, 16);
  return id;
}

void PeerMemory::read(uint64_t addr, void* dst, size_t len) const {
  readPeerMemory(pid_, addr, dst, len);
  if (exited()) {
    throwError(ErrorKind::kRemote, "pid ", pid_,
               " exited while its memory was being read (its pid may be reused)");
  }
}

}  // namespace mccl
