#include "transport/handshake.h"

#include <algorithm>
#include <cstring>

#include "transport/frame.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/random.h"

namespace mccl {
namespace {

constexpr uint32_t kHandshakeMagic = 0x5348434Du;  // "MCHS"
constexpr uint8_t kKindHelloA = 1, kKindHelloC = 2, kKindAck = 3;

void putPreamble(uint8_t* p, uint8_t kind) {
  putLE<uint32_t>(p, kHandshakeMagic);
  putLE<uint16_t>(p + 4, kProtocolVersion);
  p[6] = kind;
  p[7] = 0;
}

// Returns an empty string if the preamble is right, else what is wrong.
std::string checkPreamble(const uint8_t* p, uint8_t kind) {
  uint32_t magic = getLE<uint32_t>(p);
  if (magic != kHandshakeMagic) return strCat("bad magic 0x", std::hex, magic, " (not an MCCL peer)");
  uint16_t version = getLE<uint16_t>(p + 4);
  if (version != kProtocolVersion) {
    return strCat("peer speaks protocol version ", version, ", this build ", kProtocolVersion,
                  " (mixed MCCL versions in one job?)");
  }
  if (p[6] != kind) return strCat("unexpected handshake message kind ", int{p[6]});
  return {};
}

// MAC over a role byte, both nonces (own first) and every field that
// steers the connection: the group, both ranks (connector, acceptor), the
// world size and the connector's listening port. Role 'K' derives the
// connection's session key (nonceA first), which never crosses the wire.
Digest mac(const Secret& secret, char role, const uint8_t* nonceFirst, const uint8_t* nonceSecond,
           uint64_t group, uint32_t a, uint32_t b, uint32_t size, uint16_t port) {
  uint8_t msg[1 + 16 + 16 + 8 + 4 + 4 + 4 + 2];
  msg[0] = static_cast<uint8_t>(role);
  std::memcpy(msg + 1, nonceFirst, 16);
  std::memcpy(msg + 17, nonceSecond, 16);
  putLE<uint64_t>(msg + 33, group);
  putLE<uint32_t>(msg + 41, a);
  putLE<uint32_t>(msg + 45, b);
  putLE<uint32_t>(msg + 49, size);
  putLE<uint16_t>(msg + 53, port);
  return hmacSha256(secret.data(), secret.size(), msg, sizeof(msg));
}

}  // namespace

SessionKey handshakeAsConnector(Socket& sock, const Identity& self, uint32_t peerRank,
                                Deadline deadline) {
  uint8_t helloA[kHelloABytes];
  if (!sock.recvAll(helloA, sizeof(helloA), deadline)) {
    throwError(ErrorKind::kRemote, "the peer closed the connection before the handshake");
  }
  std::string bad = checkPreamble(helloA, kKindHelloA);
  if (!bad.empty()) throwError(ErrorKind::kRemote, "handshake: ", bad);
  const uint8_t* nonceA = helloA + 8;

  uint8_t helloC[kHelloCBytes] = {0};
  putPreamble(helloC, kKindHelloC);
  putLE<uint64_t>(helloC + 8, self.group);
  putLE<uint32_t>(helloC + 16, self.rank);
  putLE<uint32_t>(helloC + 20, peerRank);
  putLE<uint32_t>(helloC + 24, self.size);
  putLE<uint16_t>(helloC + 28, self.listenPort);
  uint8_t* nonceC = helloC + 32;
  secureRandom(nonceC, 16);
  Digest m = mac(self.secret, 'C', nonceA, nonceC, self.group, self.rank, peerRank, self.size,
                 self.listenPort);
  std::memcpy(helloC + 48, m.data(), m.size());
  sock.sendAll(helloC, sizeof(helloC), deadline);

  uint8_t ack[kAckBytes];
  bool got = false;
  std::string how;
  try {
    got = sock.recvAll(ack, sizeof(ack), deadline);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kTimeout) throw;
    how = strCat(" (", e.what(), ")");  // a reset instead of a close: the same refusal
  }
  if (!got) {
    throwError(ErrorKind::kRemote,
               "the peer rejected the handshake (different job secret, group or world size: "
               "is MCCL_SECRET_FILE or MCCL_SECRET different on the two ranks, or another job "
               "using this address?)", how);
  }
  bad = checkPreamble(ack, kKindAck);
  if (!bad.empty()) throwError(ErrorKind::kRemote, "handshake: ", bad);
  // Both MACs list the ranks as (connector, acceptor).
  Digest expect = mac(self.secret, 'A', nonceC, nonceA, self.group, self.rank, peerRank, self.size,
                      self.listenPort);
  if (!constantTimeEqual(expect.data(), ack + 8, expect.size())) {
    throwError(ErrorKind::kRemote,
               "the peer could not prove the job secret (a different job on this address?)");
  }
  return mac(self.secret, 'K', nonceA, nonceC, self.group, self.rank, peerRank, self.size,
             self.listenPort);
}

Digest wireKey(const SessionKey& key, const std::string& mode, uint32_t src, uint32_t dst) {
  std::string msg = "mccl wire key v1 " + mode;
  uint8_t ranks[8];
  putLE<uint32_t>(ranks, src);
  putLE<uint32_t>(ranks + 4, dst);
  msg.append(reinterpret_cast<const char*>(ranks), sizeof(ranks));
  return hmacSha256(key.data(), key.size(), msg.data(), msg.size());
}

AcceptorHandshake::AcceptorHandshake(const Identity& self) : self_(self) {
  secureRandom(nonceA_, sizeof(nonceA_));
  putPreamble(out_, kKindHelloA);
  std::memcpy(out_ + 8, nonceA_, sizeof(nonceA_));
  outLen_ = kHelloABytes;
}

const uint8_t* AcceptorHandshake::pendingOutput(size_t* len) const {
  *len = outLen_ - outDone_;
  return out_ + outDone_;
}

void AcceptorHandshake::consumedOutput(size_t n) {
  outDone_ += n;
  if (outDone_ < outLen_) return;
  if (state_ == State::kSendHello) {
    state_ = State::kReadHelloC;
    if (inLen_ == kHelloCBytes) verifyHelloC();
  } else if (state_ == State::kSendAck) state_ = State::kDone;
}

size_t AcceptorHandshake::feed(const uint8_t* data, size_t len) {
  if (state_ != State::kReadHelloC && state_ != State::kSendHello) {
    if (len > 0 && state_ != State::kFailed) fail("data after the handshake message");
    return 0;
  }
  size_t take = std::min(len, kHelloCBytes - inLen_);
  std::memcpy(in_ + inLen_, data, take);
  inLen_ += take;
  // Reject a stranger as soon as its first bytes are wrong.
  if (inLen_ >= 8) {
    std::string bad = checkPreamble(in_, kKindHelloC);
    if (!bad.empty()) {
      fail(bad);
      return take;
    }
  }
  if (inLen_ == kHelloCBytes && state_ == State::kReadHelloC) verifyHelloC();
  return take;
}

void AcceptorHandshake::verifyHelloC() {
  uint64_t group = getLE<uint64_t>(in_ + 8);
  uint32_t src = getLE<uint32_t>(in_ + 16);
  uint32_t dst = getLE<uint32_t>(in_ + 20);
  uint32_t size = getLE<uint32_t>(in_ + 24);
  const uint8_t* nonceC = in_ + 32;
  if (group != self_.group) return fail(strCat("group id ", group, " is not this group's"));
  if (size != self_.size) return fail(strCat("world size ", size, ", this group has ", self_.size));
  if (dst != self_.rank) return fail(strCat("addressed to rank ", dst, ", this is rank ", self_.rank));
  if (src >= self_.size || src == self_.rank) return fail(strCat("claims to be rank ", src));
  const uint16_t port = getLE<uint16_t>(in_ + 28);
  Digest expect = mac(self_.secret, 'C', nonceA_, nonceC, group, src, dst, size, port);
  if (!constantTimeEqual(expect.data(), in_ + 48, expect.size())) {
    return fail("wrong proof of the job secret");
  }
  peerRank_ = src;
  peerListenPort_ = port;
  sessionKey_ = mac(self_.secret, 'K', nonceA_, nonceC, group, src, dst, size, port);
  Digest reply = mac(self_.secret, 'A', nonceC, nonceA_, group, src, dst, size, port);
  putPreamble(out_, kKindAck);
  std::memcpy(out_ + 8, reply.data(), reply.size());
  outLen_ = kAckBytes;
  outDone_ = 0;
  state_ = State::kSendAck;
}

void AcceptorHandshake::fail(std::string why) {
  state_ = State::kFailed;
  failure_ = std::move(why);
}

}  // namespace mccl
