// libFuzzer target: both sides of the same-host attestation socket
// (transport/local_attest_linux.cc), which any local process can reach.
// The first byte picks the side:
//   even  a stranger sends the rest to this process's attestation socket:
//         nothing may crash, and no offer may become attested (only a
//         holder of the connection's session key can prove it);
//   odd   a stranger answers this process's reader with the rest: the
//         attestation must fail and no peer may be opened.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "transport/local_read.h"
#include "transport/socket.h"
#include "util/random.h"

using namespace mccl;

namespace {

sockaddr_un addrOf(const uint8_t name[16], socklen_t* len) {
  static const char* d = "0123456789abcdef";
  std::string text = "mccl-attest-";
  for (int i = 0; i < 16; ++i) {
    text += d[name[i] >> 4];
    text += d[name[i] & 15];
  }
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, text.data(), text.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + text.size());
  return a;
}

Digest key() {
  Digest k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(i * 13 + 5);
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint8_t hello[kLocalHelloBytes];
  static std::string why;
  static std::shared_ptr<LocalOffer> offer = offerLocalReads(key(), hello, &why);
  if (!offer) std::abort();
  if (size == 0) return 0;
  const bool senderSide = (data[0] & 1) == 0;
  ++data;
  --size;
  if (senderSide) {
    Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    socklen_t len = 0;
    sockaddr_un a = addrOf(hello, &len);
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&a), len) != 0) std::abort();
    // The fuzzer cannot know the offer's token, so the service answers at
    // most with a refusal; send what it takes, then wait for it to hang up.
    (void)::send(s.fd(), data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(s.fd(), SHUT_WR);
    uint8_t sink[256];
    while (::recv(s.fd(), sink, sizeof(sink), 0) > 0) {
    }
    if (offer->attested.load()) std::abort();
    return 0;
  }
  // A stranger's socket that answers the reader with the fuzz bytes.
  uint8_t name[16];
  secureRandom(name, sizeof(name));
  Socket l(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t len = 0;
  sockaddr_un a = addrOf(name, &len);
  if (::bind(l.fd(), reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(l.fd(), 1) != 0) return 0;
  std::thread stranger([&] {
    Socket c(::accept(l.fd(), nullptr, nullptr));
    if (!c.valid()) return;
    (void)::send(c.fd(), data, size, MSG_NOSIGNAL);
    ::shutdown(c.fd(), SHUT_WR);
    uint8_t sink[256];
    while (::recv(c.fd(), sink, sizeof(sink), 0) > 0) {
    }
  });
  uint8_t theirs[kLocalHelloBytes];
  std::memcpy(theirs, name, 16);
  std::memset(theirs + 16, 0xEE, 16);
  PeerMemory mem;
  std::string reason;
  if (attestPeer(theirs, *offer, &mem, &reason, 2000) || mem.isOpen()) std::abort();
  stranger.join();
  return 0;
}
