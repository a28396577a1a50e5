// Same-host reads where process_vm_readv(2) does not exist (macOS and the
// rest): every link stays on TCP. The Linux implementation is
// local_read_linux.cc; CMake chooses.
#include <unistd.h>

#include "transport/local_read.h"
#include "util/error.h"

namespace mccl {

LocalIdentity localIdentity() {
  LocalIdentity id;  // zero boot id: never taken for the same host
  id.pid = static_cast<uint32_t>(::getpid());
  return id;
}

bool canReadPeer(const LocalIdentity&, std::string* why) {
  *why = "same-host reads need Linux (process_vm_readv)";
  return false;
}

void readPeerMemory(uint32_t, uint64_t, void*, size_t) {
  throwError(ErrorKind::kSystem, "same-host reads need Linux (process_vm_readv)");
}

PeerMemory::~PeerMemory() = default;

bool PeerMemory::open(const LocalIdentity& peer, std::string* why) { return canReadPeer(peer, why); }

bool PeerMemory::exited() const { return true; }

}  // namespace mccl
