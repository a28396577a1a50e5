// The attestation socket of same-host reads (transport/local_read.h): one
// abstract Unix-domain socket per process, served by one thread, on which
// the kernel names each peer (SO_PEERCRED) and both ends prove the
// connection's session key before any pid or address is disclosed.
//
//   reader -> sender  OPEN    offer token, reader token, nonceR
//   sender -> reader  SPROOF  nonceS, MAC(key, "S"|tokens|nonceR|nonceS)
//   reader -> sender  RPROOF  MAC(key, "R"|tokens|nonceR|nonceS)
//   sender -> reader  COOKIE  cookie address, cookie bytes
//
// The sender marks its offer attested just before COOKIE; the reader then
// pins the kernel-given pid and reads the cookie back (PeerMemory::open).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "transport/local_read.h"
#include "transport/socket.h"
#include "util/bytes.h"
#include "util/error.h"
#include "util/logging.h"
#include "util/random.h"
#include "util/thread_name.h"

namespace mccl {
namespace {

constexpr uint32_t kAttestMagic = 0x414C434Du;  // "MCLA"
constexpr uint8_t kOpen = 1, kServerProof = 2, kReaderProof = 3, kCookie = 4;
constexpr size_t kPre = 8;
constexpr size_t kOpenBytes = kPre + 16 + 16 + 16;
constexpr size_t kServerProofBytes = kPre + 16 + 32;
constexpr size_t kReaderProofBytes = kPre + 32;
constexpr size_t kCookieBytes = kPre + 8 + 16;
// How long the sender's thread gives one reader: the exchange is local and
// takes microseconds, and a stalling stranger must not hold it for long.
constexpr auto kServeTimeout = std::chrono::milliseconds(1000);

void putPre(uint8_t* p, uint8_t kind) {
  putLE<uint32_t>(p, kAttestMagic);
  p[4] = kind;
  p[5] = p[6] = p[7] = 0;
}

bool goodPre(const uint8_t* p, uint8_t kind) {
  return getLE<uint32_t>(p) == kAttestMagic && p[4] == kind;
}

std::string hex(const uint8_t* b, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

sockaddr_un abstractAddr(const uint8_t name[16], socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string text = "mccl-attest-" + hex(name, 16);
  std::memcpy(a.sun_path + 1, text.data(), text.size());  // sun_path[0] = 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + text.size());
  return a;
}

Digest proof(const Digest& key, char role, const LocalToken& offer, const LocalToken& reader,
             const uint8_t* nonceR, const uint8_t* nonceS) {
  static const char kLabel[] = "mccl same-host attestation";
  uint8_t msg[sizeof(kLabel) + 1 + 16 * 4];
  std::memcpy(msg, kLabel, sizeof(kLabel));
  uint8_t* p = msg + sizeof(kLabel);
  *p++ = static_cast<uint8_t>(role);
  std::memcpy(p, offer.data(), 16);
  std::memcpy(p + 16, reader.data(), 16);
  std::memcpy(p + 32, nonceR, 16);
  std::memcpy(p + 48, nonceS, 16);
  return hmacSha256(key.data(), key.size(), msg, sizeof(msg));
}

// The kernel's word on the process at the other end of a Unix socket.
bool peerCred(int fd, ucred* out) {
  socklen_t len = sizeof(*out);
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, out, &len) == 0 && len == sizeof(*out);
}

// The socket and its thread live while offers do: the first offer starts
// them, withdrawing the last stops them (joined, so no MCCL thread outlives
// the groups that needed it).
struct Service {
  std::mutex mu;
  pid_t owner = 0;  // the process that started it: a forked child starts its own
  int fd = -1;
  std::thread* thread = nullptr;  // a pointer: a forked child must not touch the parent's
  uint8_t name[16] = {};
  std::map<LocalToken, std::weak_ptr<LocalOffer>> offers;
};

// Never destroyed (static destruction must not join or close anything).
Service& service() {
  static Service* s = new Service;
  return *s;
}

std::shared_ptr<LocalOffer> findOffer(const LocalToken& token) {
  Service& s = service();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.offers.find(token);
  return it == s.offers.end() ? nullptr : it->second.lock();
}

// One reader, on the service thread. Returns why it was refused ("" if not).
std::string serveOne(int fd) {
  Socket sock(fd);
  const Deadline d = Deadline::after(kServeTimeout);
  ucred cred{};
  if (!peerCred(fd, &cred)) return strCat("SO_PEERCRED failed: ", std::strerror(errno));
  if (cred.uid != ::geteuid()) return strCat("pid ", cred.pid, " runs as uid ", cred.uid);
  uint8_t open[kOpenBytes];
  if (!sock.recvAll(open, sizeof(open), d) || !goodPre(open, kOpen)) return "not an OPEN message";
  LocalToken offerTok, readerTok;
  std::memcpy(offerTok.data(), open + kPre, 16);
  std::memcpy(readerTok.data(), open + kPre + 16, 16);
  const uint8_t* nonceR = open + kPre + 32;
  if (offerTok == readerTok) return "the reader's token is the offer's own (a reflection)";
  std::shared_ptr<LocalOffer> offer = findOffer(offerTok);
  if (!offer) return "no live offer has that token";

  uint8_t sp[kServerProofBytes];
  putPre(sp, kServerProof);
  uint8_t* nonceS = sp + kPre;
  secureRandom(nonceS, 16);
  Digest m = proof(offer->key, 'S', offerTok, readerTok, nonceR, nonceS);
  std::memcpy(sp + kPre + 16, m.data(), m.size());
  sock.sendAll(sp, sizeof(sp), d);

  uint8_t rp[kReaderProofBytes];
  if (!sock.recvAll(rp, sizeof(rp), d) || !goodPre(rp, kReaderProof)) {
    return strCat("pid ", cred.pid, " sent no proof");
  }
  Digest expect = proof(offer->key, 'R', offerTok, readerTok, nonceR, nonceS);
  if (!constantTimeEqual(expect.data(), rp + kPre, expect.size())) {
    return strCat("pid ", cred.pid, " does not hold the connection's session key");
  }
  offer->peerPid.store(static_cast<uint32_t>(cred.pid));
  offer->attested.store(true);
  uint8_t ck[kCookieBytes];
  putPre(ck, kCookie);
  uint64_t addr = 0;
  std::array<uint8_t, 16> bytes{};
  localCookie(&addr, &bytes);
  putLE<uint64_t>(ck + kPre, addr);
  std::memcpy(ck + kPre + 8, bytes.data(), 16);
  sock.sendAll(ck, sizeof(ck), d);
  return "";
}

void serveLoop(int listenFd) {
  nameThisThread("mccl-attest");
  RateLimiter log{5, std::chrono::seconds(10)};
  for (;;) {
    const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      return;  // shut down (withdrawLocalReads) or gone
    }
    std::string why;
    try {
      why = serveOne(fd);
    } catch (const Error& e) {
      why = e.what();
    }
    uint64_t suppressed = 0;
    if (!why.empty() && log.allow(&suppressed)) {
      MCCL_LOG(kWarn, "same-host attestation refused a reader: ", why,
               suppressed ? strCat(" (", suppressed, " more refusals not shown)") : std::string());
    }
  }
}

// Starts (or, in a forked child, restarts) the service; under s.mu.
bool ensureStarted(Service& s, std::string* why) {
  const pid_t me = ::getpid();
  if (s.owner == me && s.fd >= 0) return true;
  if (s.fd >= 0 && s.owner != me) {
    ::close(s.fd);  // the parent's, inherited across fork; its thread is not here
    s.thread = nullptr;  // (leaked on purpose: the parent's thread object)
    s.offers.clear();
  }
  s.fd = -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = strCat("socket(AF_UNIX) failed: ", std::strerror(errno));
    return false;
  }
  secureRandom(s.name, sizeof(s.name));
  socklen_t len = 0;
  sockaddr_un a = abstractAddr(s.name, &len);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 64) != 0) {
    *why = strCat("binding the attestation socket failed: ", std::strerror(errno));
    ::close(fd);
    return false;
  }
  s.fd = fd;
  s.owner = me;
  s.thread = new std::thread(serveLoop, fd);
  return true;
}

}  // namespace

std::shared_ptr<LocalOffer> offerLocalReads(const Digest& key, uint8_t hello[kLocalHelloBytes],
                                            std::string* why) {
  Service& s = service();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ensureStarted(s, why)) return nullptr;
  auto offer = std::make_shared<LocalOffer>();
  offer->key = key;
  secureRandom(offer->token.data(), offer->token.size());
  std::erase_if(s.offers, [](const auto& kv) { return kv.second.expired(); });
  s.offers[offer->token] = offer;
  std::memcpy(hello, s.name, 16);
  std::memcpy(hello + 16, offer->token.data(), 16);
  return offer;
}

void withdrawLocalReads(const LocalOffer& offer) {
  Service& s = service();
  int fd = -1;
  std::thread* thread = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.owner != ::getpid()) return;  // a forked child withdrawing the parent's offer
    s.offers.erase(offer.token);
    std::erase_if(s.offers, [](const auto& kv) { return kv.second.expired(); });
    if (!s.offers.empty() || s.fd < 0) return;
    fd = s.fd;
    thread = s.thread;
    s.fd = -1;
    s.thread = nullptr;
  }
  // Outside the lock: the thread may be serving a reader (it takes the lock).
  ::shutdown(fd, SHUT_RDWR);  // accept(2) returns: the loop ends
  if (thread) {
    thread->join();
    delete thread;
  }
  ::close(fd);
}

bool attestPeer(const uint8_t hello[kLocalHelloBytes], const LocalOffer& mine, PeerMemory* out,
                std::string* why, int timeoutMs) {
  LocalToken peerTok;
  std::memcpy(peerTok.data(), hello + 16, 16);
  if (peerTok == mine.token) {
    *why = "the peer's hello carries this end's own token (a reflected hello)";
    return false;
  }
  const Deadline d = Deadline::after(std::chrono::milliseconds(timeoutMs));
  Socket sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    *why = strCat("socket(AF_UNIX) failed: ", std::strerror(errno));
    return false;
  }
  socklen_t len = 0;
  sockaddr_un a = abstractAddr(hello, &len);
  if (::connect(sock.fd(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
    // The usual answer across hosts and network namespaces: no such socket.
    *why = strCat("the peer's attestation socket is not reachable here (",
                  std::strerror(errno), "): another host or network namespace");
    return false;
  }
  ucred cred{};
  if (!peerCred(sock.fd(), &cred)) {
    *why = strCat("SO_PEERCRED failed: ", std::strerror(errno));
    return false;
  }
  if (cred.uid != ::geteuid()) {
    *why = strCat("the peer's process ", cred.pid, " runs as uid ", cred.uid, ", this one as ",
                  ::geteuid());
    return false;
  }
  try {
    uint8_t open[kOpenBytes];
    putPre(open, kOpen);
    std::memcpy(open + kPre, peerTok.data(), 16);
    std::memcpy(open + kPre + 16, mine.token.data(), 16);
    uint8_t* nonceR = open + kPre + 32;
    secureRandom(nonceR, 16);
    sock.sendAll(open, sizeof(open), d);
    uint8_t sp[kServerProofBytes];
    if (!sock.recvAll(sp, sizeof(sp), d) || !goodPre(sp, kServerProof)) {
      *why = strCat("process ", cred.pid, " refused the attestation (not this connection's peer)");
      return false;
    }
    const uint8_t* nonceS = sp + kPre;
    Digest expect = proof(mine.key, 'S', peerTok, mine.token, nonceR, nonceS);
    if (!constantTimeEqual(expect.data(), sp + kPre + 16, expect.size())) {
      *why = strCat("process ", cred.pid, " does not hold the connection's session key");
      return false;
    }
    uint8_t rp[kReaderProofBytes];
    putPre(rp, kReaderProof);
    Digest m = proof(mine.key, 'R', peerTok, mine.token, nonceR, nonceS);
    std::memcpy(rp + kPre, m.data(), m.size());
    sock.sendAll(rp, sizeof(rp), d);
    uint8_t ck[kCookieBytes];
    if (!sock.recvAll(ck, sizeof(ck), d) || !goodPre(ck, kCookie)) {
      *why = strCat("process ", cred.pid, " sent no cookie");
      return false;
    }
    std::array<uint8_t, 16> cookie;
    std::memcpy(cookie.data(), ck + kPre + 8, 16);
    return out->open(static_cast<uint32_t>(cred.pid), getLE<uint64_t>(ck + kPre), cookie, why);
  } catch (const Error& e) {
    *why = strCat("attestation with process ", cred.pid, " failed: ", e.what());
    return false;
  }
}

}  // namespace mccl
