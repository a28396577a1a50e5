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

}  // namespace mccl
