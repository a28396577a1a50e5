// libFuzzer target: the acceptor's side of the connection handshake, which
// strangers reach first. Arbitrary bytes, delivered in arbitrary pieces, must
// never crash it, and must never get a connection accepted: only a peer that
// knows the job secret can produce the proof it checks.
#include <cstdint>
#include <cstdlib>

#include "transport/handshake.h"

using namespace mccl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Identity self;
  self.group = 0x0123456789abcdefull;
  self.rank = 0;
  self.size = 4;
  for (size_t i = 0; i < self.secret.size(); ++i) self.secret[i] = static_cast<uint8_t>(i * 7 + 1);
  AcceptorHandshake hs(self);
  // The first byte picks how the rest is split into reads (1..16 bytes).
  size_t piece = size > 0 ? (data[0] % 16) + 1 : 1;
  size_t pos = size > 0 ? 1 : 0;
  while (pos < size && hs.state() != AcceptorHandshake::State::kFailed) {
    size_t len = 0;
    hs.pendingOutput(&len);
    if (len > 0) hs.consumedOutput(len);  // the socket took our greeting
    size_t n = piece < size - pos ? piece : size - pos;
    size_t took = hs.feed(data + pos, n);
    if (took > n) std::abort();
    pos += n;
  }
  size_t len = 0;
  hs.pendingOutput(&len);
  if (len > 0) hs.consumedOutput(len);
  if (hs.state() == AcceptorHandshake::State::kSendAck || hs.state() == AcceptorHandshake::State::kDone) {
    std::abort();  // accepted without the secret
  }
  if (hs.state() == AcceptorHandshake::State::kFailed && hs.failure().empty()) std::abort();
  return 0;
}
