// Connection handshake: proves that both ends belong to the same job and
// group without sending the job secret.
//
//   acceptor  -> connector  HelloA   magic, version, nonceA
//   connector -> acceptor   HelloC   magic, version, group, src, dst, size,
//                                    listen port, nonceC,
//                                    HMAC(secret, "C"|nonceA|nonceC|ids)
//   acceptor  -> connector  Ack      magic, version, HMAC(secret, "A"|nonceC|nonceA|ids)
//
// "ids" are every field that steers the connection: group, both ranks, world
// size and the connector's listening port. Both ends then hold a session key,
// HMAC(secret, "K"|nonceA|nonceC|ids), unique to the connection and never
// sent: it proves, on a second channel, that a process is this connection's
// other end (same-host attestation, transport/local_read.h).
//
// The acceptor closes the socket, without a reply, on anything unexpected,
// so a stranger learns nothing. The connector side is a blocking call; the
// acceptor side is a small state machine driven by the listener's poll loop.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "transport/socket.h"
#include "util/sha256.h"

namespace mccl {

using Secret = std::array<uint8_t, 32>;
using SessionKey = Digest;

struct Identity {
  uint64_t group = 0;
  uint32_t rank = 0;
  uint32_t size = 0;
  uint16_t listenPort = 0;  // where this rank accepts connections (for error messages)
  Secret secret{};
};

constexpr size_t kHelloABytes = 24;
constexpr size_t kHelloCBytes = 80;
constexpr size_t kAckBytes = 40;

// Connector side; returns the session key. Throws kRemote (rejected, wrong
// job, closed) or kTimeout.
SessionKey handshakeAsConnector(Socket& sock, const Identity& self, uint32_t peerRank,
                                Deadline deadline);

// The key of the frames rank `src` sends to rank `dst` on a connection with
// session key `key` (MCCL_WIRE_SECURITY; `mode` is "integrity" or
// "encrypt"): one key per direction, so neither end's frames can be
// reflected back to it.
Digest wireKey(const SessionKey& key, const std::string& mode, uint32_t src, uint32_t dst);

class AcceptorHandshake {
 public:
  enum class State { kSendHello, kReadHelloC, kSendAck, kDone, kFailed };

  explicit AcceptorHandshake(const Identity& self);

  // Bytes to write now (HelloA or Ack) and how much of them was written.
  const uint8_t* pendingOutput(size_t* len) const;
  void consumedOutput(size_t n);
  // Feeds bytes read from the socket; returns how many it took.
  size_t feed(const uint8_t* data, size_t len);

  State state() const { return state_; }
  uint32_t peerRank() const { return peerRank_; }
  // The connector's own listening port, as it announced it (0 if unknown).
  uint16_t peerListenPort() const { return peerListenPort_; }
  // The connection's session key (valid once the state is kSendAck or kDone).
  const SessionKey& sessionKey() const { return sessionKey_; }
  const std::string& failure() const { return failure_; }

 private:
  void verifyHelloC();
  void fail(std::string why);

  const Identity& self_;
  State state_ = State::kSendHello;
  uint8_t nonceA_[16];
  uint8_t out_[kAckBytes > kHelloABytes ? kAckBytes : kHelloABytes];
  size_t outLen_ = 0, outDone_ = 0;
  uint8_t in_[kHelloCBytes];
  size_t inLen_ = 0;
  uint32_t peerRank_ = 0;
  uint16_t peerListenPort_ = 0;
  SessionKey sessionKey_{};
  std::string failure_;
};

}  // namespace mccl
