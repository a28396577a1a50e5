// Same-host single-copy transfers ("local reads").
//
// Two ranks on one Linux host need not push large payloads through TCP
// loopback, which copies every byte twice (sender -> kernel -> receiver) and
// runs the whole TCP stack on the way. Instead the sender names the memory
// and the receiver copies it straight into place with process_vm_readv(2)
// (Linux cross-memory attach): one copy, no protocol work.
//
// Who the peer is on this host comes from the kernel, never from a frame:
//  1. Over the TCP connection each end sends only a LOCAL_HELLO naming its
//     process's attestation socket (a Unix-domain socket in the abstract
//     namespace, so only processes in the same network namespace reach it)
//     and a random token for its end of this connection. No pid and no
//     address crosses TCP.
//  2. The reader connects to the peer's socket. The kernel gives each side
//     the other's pid and uid (SO_PEERCRED); both prove, with MACs keyed by
//     the connection's session key (transport/handshake.h, never sent), that
//     they are the two ends of this TCP connection. A token equal to one's
//     own is refused, so a peer cannot reflect a process onto itself.
//  3. Only then does the sender tell the reader, on that socket, the address
//     and bytes of a random cookie; the reader pins the kernel-given pid with
//     a pidfd and reads the cookie back, proving the pinned process is the
//     one that answered.
// A REF frame from a peer that was not attested this way is a protocol fault
// (transport/connection.cc). Across hosts, network namespaces (so `mccl
// netlab` hosts stay apart), users, under a restrictive
// kernel.yama.ptrace_scope and on systems without process_vm_readv (macOS)
// the attestation fails and the link keeps plain TCP.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "util/sha256.h"

namespace mccl {

using LocalToken = std::array<uint8_t, 16>;

// Wire size of a LOCAL_HELLO payload: the attestation socket's name, then
// the sending end's token.
constexpr size_t kLocalHelloBytes = 16 + 16;

// One end of one connection, offering its memory to the peer. The process's
// attestation socket serves it while it lives.
struct LocalOffer {
  LocalToken token{};
  Digest key{};  // the connection's session key
  // Set (on the attestation thread) once the peer proved that it is a local
  // process of this user holding the session key; only then may this end
  // send REF frames.
  std::atomic<bool> attested{false};
  std::atomic<uint32_t> peerPid{0};  // as the kernel gave it
};

// Registers an offer for a connection with session key `key` (starting this
// process's attestation socket on first use, again after a fork) and writes
// the LOCAL_HELLO payload that names it. Returns null, with *why, where
// same-host reads do not exist.
std::shared_ptr<LocalOffer> offerLocalReads(const Digest& key, uint8_t hello[kLocalHelloBytes],
                                            std::string* why);

// Withdraws an offer (its connection closed). The last one stops the
// process's attestation socket and joins its thread. Idempotent.
void withdrawLocalReads(const LocalOffer& offer);

class PeerMemory;

// The reader's side: attests the peer whose LOCAL_HELLO is `hello`, as the
// other end of the connection that `mine` offers, and pins it in *out.
// False, with *why, when the peer is not a provable local process (another
// host or namespace, another user, a wrong key, a reflected token).
// Blocks for at most `timeoutMs`.
bool attestPeer(const uint8_t hello[kLocalHelloBytes], const LocalOffer& mine, PeerMemory* out,
                std::string* why, int timeoutMs = 2000);

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

  // Pins process `pid` (as the kernel named it) and proves it is the
  // process that holds `cookie` at `cookieAddr`; false, with *why, when it
  // cannot (also where pidfds are missing: Linux < 5.3).
  bool open(uint32_t pid, uint64_t cookieAddr, const std::array<uint8_t, 16>& cookie,
            std::string* why);
  bool isOpen() const { return pidfd_ >= 0; }
  uint32_t pid() const { return pid_; }
  // readPeerMemory, then a check that the process had not exited meanwhile
  // (its pid could belong to another process by then): throws if it had.
  void read(uint64_t addr, void* dst, size_t len) const;

 private:
  bool exited() const;
  int pidfd_ = -1;
  uint32_t pid_ = 0;
};

// This process's cookie (random bytes at a fixed address; for tests).
void localCookie(uint64_t* addr, std::array<uint8_t, 16>* bytes);

}  // namespace mccl
