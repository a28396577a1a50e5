#include <gtest/gtest.h>

#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "transport/handshake.h"
#include "transport/listener.h"
#include "util/error.h"

namespace mccl {
namespace {

Identity ident(uint32_t rank, uint8_t secretByte = 7, uint64_t group = 99) {
  Identity id;
  id.group = group;
  id.rank = rank;
  id.size = 4;
  id.secret.fill(secretByte);
  return id;
}

// Drives an AcceptorHandshake over one end of a socketpair.
AcceptorHandshake::State runAcceptor(int fd, const Identity& self, std::string* failure,
                                     SessionKey* key = nullptr) {
  AcceptorHandshake hs(self);
  for (;;) {
    auto st = hs.state();
    if (st == AcceptorHandshake::State::kDone || st == AcceptorHandshake::State::kFailed) {
      *failure = hs.failure();
      if (key) *key = hs.sessionKey();
      return st;
    }
    size_t len = 0;
    const uint8_t* out = hs.pendingOutput(&len);
    if (len > 0) {
      ssize_t n = ::send(fd, out, len, MSG_NOSIGNAL);
      if (n <= 0) return AcceptorHandshake::State::kFailed;
      hs.consumedOutput(static_cast<size_t>(n));
      continue;
    }
    uint8_t buf[128];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *failure = "eof";
      return AcceptorHandshake::State::kFailed;
    }
    hs.feed(buf, static_cast<size_t>(n));
  }
}

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a = Socket(fds[0]);
    b = Socket(fds[1]);
  }
  Socket a, b;
};

TEST(Handshake, SucceedsWithSameSecret) {
  SessionKey first{};
  for (int round = 0; round < 2; ++round) {
    Pair p;
    Identity acc = ident(2), con = ident(1);
    std::string failure;
    AcceptorHandshake::State st;
    SessionKey accKey{}, conKey{};
    std::thread t([&] { st = runAcceptor(p.b.fd(), acc, &failure, &accKey); });
    EXPECT_NO_THROW(conKey = handshakeAsConnector(p.a, con, 2, Deadline::after(std::chrono::seconds(5))));
    t.join();
    EXPECT_EQ(st, AcceptorHandshake::State::kDone) << failure;
    // Both ends hold the same session key; it is fresh per connection and is
    // neither the secret nor zero.
    EXPECT_EQ(accKey, conKey);
    EXPECT_NE(conKey, SessionKey{});
    EXPECT_NE(std::vector<uint8_t>(conKey.begin(), conKey.end()),
              std::vector<uint8_t>(con.secret.begin(), con.secret.end()));
    if (round == 0) first = conKey;
    else EXPECT_NE(conKey, first) << "two connections must not share a session key";
  }
}

TEST(Handshake, ListenPortIsCoveredByTheProof) {
  // A man in the middle rewrites the connector's announced listening port
  // (which steers where errors and reconnections point): the acceptor refuses.
  Pair toAcceptor, toConnector;
  Identity acc = ident(2), con = ident(1);
  con.listenPort = 4321;
  std::string failure;
  AcceptorHandshake::State st;
  std::thread accThread([&] {
    st = runAcceptor(toAcceptor.b.fd(), acc, &failure);
    toAcceptor.b.close();
  });
  std::thread mitm([&] {
    uint8_t helloA[kHelloABytes], helloC[kHelloCBytes];
    const Deadline d = Deadline::after(std::chrono::seconds(5));
    if (!toAcceptor.a.recvAll(helloA, sizeof(helloA), d)) return;
    toConnector.b.sendAll(helloA, sizeof(helloA));
    if (!toConnector.b.recvAll(helloC, sizeof(helloC), d)) return;
    helloC[28] ^= 1;  // the listening port, little-endian low byte
    toAcceptor.a.sendAll(helloC, sizeof(helloC));
    uint8_t ack[kAckBytes];
    if (toAcceptor.a.recvAll(ack, sizeof(ack), d)) toConnector.b.sendAll(ack, sizeof(ack));
    toConnector.b.close();
  });
  EXPECT_THROW(handshakeAsConnector(toConnector.a, con, 2, Deadline::after(std::chrono::seconds(5))),
               Error);
  mitm.join();
  accThread.join();
  EXPECT_EQ(st, AcceptorHandshake::State::kFailed);
  EXPECT_NE(failure.find("secret"), std::string::npos) << failure;
}

TEST(Handshake, WrongSecretIsRejectedWithoutReply) {
  Pair p;
  Identity acc = ident(2), con = ident(1, /*secret*/ 8);
  std::string failure;
  std::thread t([&] {
    runAcceptor(p.b.fd(), acc, &failure);
    p.b.close();  // the listener closes without an answer
  });
  try {
    handshakeAsConnector(p.a, con, 2, Deadline::after(std::chrono::seconds(5)));
    ADD_FAILURE() << "expected rejection";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRemote);
    EXPECT_NE(std::string(e.what()).find("rejected"), std::string::npos) << e.what();
  }
  t.join();
  EXPECT_NE(failure.find("secret"), std::string::npos) << failure;
}

TEST(Handshake, WrongGroupOrRankIsRejected) {
  for (int variant = 0; variant < 3; ++variant) {
    Pair p;
    Identity acc = ident(2);
    Identity con = variant == 0 ? ident(1, 7, 1234) : ident(variant == 1 ? 2 : 1);
    uint32_t dst = variant == 2 ? 3 : 2;
    std::string failure;
    std::thread t([&] {
      runAcceptor(p.b.fd(), acc, &failure);
      p.b.close();
    });
    EXPECT_THROW(handshakeAsConnector(p.a, con, dst, Deadline::after(std::chrono::seconds(5))), Error);
    t.join();
    const char* needle[] = {"group id", "claims to be rank", "addressed to rank"};
    EXPECT_NE(failure.find(needle[variant]), std::string::npos) << failure;
  }
}

TEST(Handshake, GarbageFailsFast) {
  Identity acc = ident(2);
  AcceptorHandshake hs(acc);
  size_t len;
  hs.pendingOutput(&len);
  hs.consumedOutput(len);
  const char junk[] = "GET / HTTP/1.1\r\n";
  hs.feed(reinterpret_cast<const uint8_t*>(junk), sizeof(junk) - 1);
  EXPECT_EQ(hs.state(), AcceptorHandshake::State::kFailed);
  EXPECT_NE(hs.failure().find("magic"), std::string::npos);
}

TEST(Listener, StrangersAreClosedAndPeersAccepted) {
  Identity acc = ident(0), con = ident(1);
  con.listenPort = 4321;  // announced in the handshake, named in errors
  std::atomic<int> accepted{0};
  Listener l(SockAddr::parse("127.0.0.1:0"), "", acc, std::chrono::milliseconds(500),
             [&](Socket, uint32_t peer, uint16_t port, const SessionKey&) {
               accepted += peer == 1 && port == 4321 ? 1 : 100;
             },
             "test: ");
  // A stranger that sends garbage, one that sends nothing, one that closes at once.
  Socket garbage = Socket::connect(l.address(), Deadline::after(std::chrono::seconds(2)), "t");
  garbage.sendAll("hello there, this is not MCCL", 29);
  Socket silent = Socket::connect(l.address(), Deadline::after(std::chrono::seconds(2)), "t");
  { Socket quick = Socket::connect(l.address(), Deadline::after(std::chrono::seconds(2)), "t"); }
  // A real peer still gets in while the silent one is pending.
  Socket good = Socket::connect(l.address(), Deadline::after(std::chrono::seconds(2)), "t");
  handshakeAsConnector(good, con, 0, Deadline::after(std::chrono::seconds(2)));
  for (int i = 0; i < 200 && accepted.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(accepted.load(), 1);
  // The silent connection is dropped at the handshake timeout.
  for (int i = 0; i < 300 && l.rejected() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(l.rejected(), 3u);
  l.stop();
}

// More peers than handshake slots dial at once (the first alltoall of a
// large job): the ones past the slots wait in the kernel's backlog, and no
// young handshake is evicted for them, so every one gets in.
TEST(Listener, ABurstOfPeersBeyondTheSlotsAllGetIn) {
  Identity acc = ident(0);
  acc.size = 200;
  std::atomic<int> accepted{0};
  Listener l(SockAddr::parse("127.0.0.1:0"), "", acc, std::chrono::milliseconds(5000),
             [&](Socket, uint32_t, uint16_t, const SessionKey&) { ++accepted; }, "test: ");
  const int n = 160;
  std::atomic<int> ready{0}, failed{0};
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> peers;
  for (int i = 0; i < n; ++i) {
    peers.emplace_back([&, i] {
      Identity con = ident(static_cast<uint32_t>(1 + i));
      con.size = 200;
      ++ready;
      while (ready.load() < n) std::this_thread::yield();
      try {
        Socket s = Socket::connect(l.address(), Deadline::after(std::chrono::seconds(10)), "t");
        handshakeAsConnector(s, con, 0, Deadline::after(std::chrono::seconds(10)));
      } catch (const Error& e) {
        ++failed;
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : peers) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) {
      ADD_FAILURE() << failed.load() << " of " << n << " failed, e.g.: " << e;
      break;
    }
  }
  for (int i = 0; i < 400 && accepted.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(accepted.load(), n);
  EXPECT_EQ(l.rejected(), 0u);
  l.stop();
}

TEST(Listener, PortRange) {
  Identity acc = ident(0);
  Listener l1(SockAddr::parse("127.0.0.1:0"), "47211-47215", acc, std::chrono::milliseconds(500),
              [](Socket, uint32_t, uint16_t, const SessionKey&) {}, "");
  Listener l2(SockAddr::parse("127.0.0.1:0"), "47211-47215", acc, std::chrono::milliseconds(500),
              [](Socket, uint32_t, uint16_t, const SessionKey&) {}, "");
  EXPECT_GE(l1.address().port(), 47211);
  EXPECT_LE(l2.address().port(), 47215);
  EXPECT_NE(l1.address().port(), l2.address().port());
  // A bind that fails for another reason than "in use" says so (here: an
  // address this host does not have).
  try {
    Listener(SockAddr::parse("198.19.255.254:0"), "47300-47302", acc, std::chrono::milliseconds(1),
             [](Socket, uint32_t, uint16_t, const SessionKey&) {}, "");
    ADD_FAILURE() << "bound an address this host does not have";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot listen on 198.19.255.254:47300"), std::string::npos) << what;
    EXPECT_EQ(what.find("no free port"), std::string::npos) << what;
  }
  int lo = 0, hi = 0;
  EXPECT_TRUE(parsePortRange("1000-2000", &lo, &hi));
  for (const char* bad : {"1000abc-2000", "1000-2000x", " 1000-2000", "+1-2", "0-5", "5-70000", "-", "12"}) {
    EXPECT_FALSE(parsePortRange(bad, &lo, &hi)) << bad;
  }
  EXPECT_THROW(Listener(SockAddr::parse("127.0.0.1:0"), "5-3", acc, std::chrono::milliseconds(1),
                        [](Socket, uint32_t, uint16_t, const SessionKey&) {}, ""),
               Error);
}

}  // namespace
}  // namespace mccl
