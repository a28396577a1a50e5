// Same-host single-copy transfers ("local reads").
//
// Two ranks on one Linux host need not push large payloads through TCP
// loopback, which copies every byte twice (sender -> kernel -> receiver) and
// runs the whole TCP stack on the way. Instead the sender names the memory
// and the receiver copies it straight into place with process_vm_readv(2)
// (Linux cross-memory attach): one copy, no protocol work.
//
// Whether a peer's memory is readable is proven, not assumed: each side
// announces its boot id, network namespace, pid and the address of a random
// cookie; the other side reads the cookie back through process_vm_readv and
// compares. It fails (and the link keeps plain TCP) across hosts, network
// namespaces (so `mccl netlab` hosts stay apart) and pid namespaces, for
// other users, under a restrictive kernel.yama.ptrace_scope, and on systems
// without the call (macOS).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mccl {

struct LocalIdentity {
  std::array<uint8_t, 16> bootId{};  // zero when unknown: never same-host
  uint64_t netNs = 0;                // inode of the network namespace
  uint32_t pid = 0;
  uint64_t cookieAddr = 0;
  std::array<uint8_t, 16> cookie{};
};

// Wire size of an announcement (the payload of a LOCAL_HELLO frame).
constexpr size_t kLocalHelloBytes = 16 + 8 + 4 + 8 + 16;

// This process (pid read at each call: it changes across fork).
LocalIdentity localIdentity();
void encodeLocalHello(const LocalIdentity& id, uint8_t out[kLocalHelloBytes]);
LocalIdentity decodeLocalHello(const uint8_t in[kLocalHelloBytes]);

// Whether this process can read `peer`'s memory; when not, *why says so.
bool canReadPeer(const LocalIdentity& peer, std::string* why);

// Copies `len` bytes at address `addr` of process `pid` into `dst`. Throws
// mccl::Error naming the process, the range and errno when it cannot.
void readPeerMemory(uint32_t pid, uint64_t addr, void* dst, size_t len);

// A peer process whose memory this one reads, pinned by a pidfd so that a
// recycled pid is never mistaken for it. Not thread-safe; one reader.
class PeerMemory {
 public:
  PeerMemory() = default;
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  // Pins the process and proves its memory readable (canReadPeer); false,
  // with *why, when it cannot (also where pidfds are missing: Linux < 5.3).
  bool open(const LocalIdentity& peer, std::string* why);
  bool isOpen() const { return pidfd_ >= 0; }
  // readPeerMemory, then a check that the process had not exited meanwhile
  // (its pid could belong to another process by then): throws if it had.
  void read(uint64_t addr, void* dst, size_t len) const;

 private:
  bool exited() const;
  int pidfd_ = -1;
  uint32_t pid_ = 0;
};

}  // namespace mccl
