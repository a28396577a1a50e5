// Same-host reads where process_vm_readv(2) and abstract Unix sockets do not
// exist (macOS and the rest): every link stays on TCP. The Linux
// implementation is local_read_linux.cc and local_attest_linux.cc; CMake
// chooses.
#include "transport/local_read.h"
#include "util/error.h"

namespace mccl {
namespace {
constexpr const char* kWhy = "same-host reads need Linux (process_vm_readv)";
}  // namespace

std::shared_ptr<LocalOffer> offerLocalReads(const Digest&, uint8_t*, std::string* why) {
  *why = kWhy;
  return nullptr;
}

void withdrawLocalReads(const LocalOffer&) {}

bool attestPeer(const uint8_t*, const LocalOffer&, PeerMemory*, std::string* why, int) {
  *why = kWhy;
  return false;
}

void localCookie(uint64_t* addr, std::array<uint8_t, 16>* bytes) {
  *addr = 0;
  bytes->fill(0);
}

void readPeerMemory(uint32_t, uint64_t, void*, size_t) { throwError(ErrorKind::kSystem, kWhy); }

PeerMemory::~PeerMemory() = default;

bool PeerMemory::open(uint32_t, uint64_t, const std::array<uint8_t, 16>&, std::string* why) {
  *why = kWhy;
  return false;
}

bool PeerMemory::exited() const { return true; }

}  // namespace mccl
