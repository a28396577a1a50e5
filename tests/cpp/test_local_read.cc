// Same-host reads (transport/local_read.h): the kernel-attested probe that
// decides whether a peer's memory is readable (session key, reflection,
// impostor socket, a forked peer named by SO_PEERCRED), REF frames between
// two real connections, a fake peer that breaks the protocol (its own hello
// replayed, a remote peer's LOCAL_OK or REF, an unknown REF_DONE token,
// closing before it copied a payload offered to it), and a pinned peer
// process that exits.
#include <gtest/gtest.h>

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "connection_rig.h"
#include "transport/local_read.h"
#include "util/bytes.h"

namespace mccl {
namespace {

bool waitFor(const std::function<bool()>& pred) {
  for (int i = 0; i < 500 && !pred(); ++i) std::this_thread::sleep_for(10ms);
  return pred();
}

// Counts its calls and remembers the last error.
class CountingCallback : public SendCallback {
 public:
  void sendDone(const Error* err) override {
    std::lock_guard<std::mutex> lock(mu);
    ++calls;
    error = err ? err->what() : "";
  }
  int count() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
  std::mutex mu;
  int calls = 0;
  std::string error;
};

FrameHeader controlHeader(FrameType type, uint64_t offset = 0) {
  FrameHeader h;
  h.type = type;
  h.group = 77;
  h.src = 1;
  h.offset = offset;
  return h;
}

Digest keyOf(uint8_t b) {
  Digest k;
  k.fill(b);
  return k;
}

std::array<uint8_t, kLocalHelloBytes> helloOf(const LocalOffer& offer, const uint8_t* socketName) {
  std::array<uint8_t, kLocalHelloBytes> h{};
  std::memcpy(h.data(), socketName, 16);
  std::memcpy(h.data() + 16, offer.token.data(), 16);
  return h;
}

TEST(LocalRead, AttestationNamesThePeerByTheKernelAndNeedsTheSessionKey) {
  // Two ends of one connection in this process (ranks as threads): same key.
  std::array<uint8_t, kLocalHelloBytes> helloA{}, helloB{}, helloC{};
  std::string why;
  auto a = offerLocalReads(keyOf(1), helloA.data(), &why);
  auto b = offerLocalReads(keyOf(1), helloB.data(), &why);
  auto c = offerLocalReads(keyOf(2), helloC.data(), &why);  // another connection
  ASSERT_TRUE(a && b && c) << why;
  EXPECT_EQ(0, std::memcmp(helloA.data(), helloB.data(), 16)) << "one socket per process";
  EXPECT_NE(a->token, b->token);

  PeerMemory mem;
  ASSERT_TRUE(attestPeer(helloB.data(), *a, &mem, &why)) << why;
  EXPECT_EQ(mem.pid(), static_cast<uint32_t>(::getpid()));
  EXPECT_TRUE(b->attested.load()) << "the sender learns that its reader is local";
  EXPECT_EQ(b->peerPid.load(), static_cast<uint32_t>(::getpid()));
  std::vector<uint8_t> data(70001), got(data.size());
  std::iota(data.begin(), data.end(), 5);
  mem.read(reinterpret_cast<uintptr_t>(data.data()), got.data(), got.size());
  EXPECT_EQ(got, data);

  // A reader without the connection's key: the sender proves nothing to it
  // and marks nothing.
  PeerMemory m2;
  EXPECT_FALSE(attestPeer(helloC.data(), *a, &m2, &why));
  EXPECT_NE(why.find("session key"), std::string::npos) << why;
  EXPECT_FALSE(c->attested.load());
  EXPECT_FALSE(m2.isOpen());

  // This end's own hello handed back (a reflection) is refused before any
  // socket is touched.
  EXPECT_FALSE(attestPeer(helloA.data(), *a, &m2, &why));
  EXPECT_NE(why.find("own token"), std::string::npos) << why;

  // A token no live offer has (a withdrawn connection, a guess).
  auto stale = helloB;
  stale[20] ^= 1;
  EXPECT_FALSE(attestPeer(stale.data(), *a, &m2, &why));
  EXPECT_NE(why.find("refused"), std::string::npos) << why;

  // A socket name that does not exist here: another host or namespace.
  auto far = helloB;
  far[0] ^= 1;
  EXPECT_FALSE(attestPeer(far.data(), *a, &m2, &why));
  EXPECT_NE(why.find("not reachable"), std::string::npos) << why;
}

int attestThreads() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(f, name) && name == "mccl-attest") ++n;
  }
  ::closedir(d);
  return n;
}

TEST(LocalRead, AttestationSocketLivesWhileOffersDo) {
  const int before = attestThreads();
  std::string why;
  std::array<uint8_t, kLocalHelloBytes> h1{}, h2{}, h3{};
  auto a = offerLocalReads(keyOf(11), h1.data(), &why);
  auto b = offerLocalReads(keyOf(11), h2.data(), &why);
  ASSERT_TRUE(a && b) << why;
  const int want = before == 0 ? 1 : before;
  EXPECT_TRUE(waitFor([&] { return attestThreads() == want; })) << attestThreads();  // named once it runs
  withdrawLocalReads(*a);
  PeerMemory m;
  EXPECT_TRUE(attestPeer(h2.data(), *a, &m, &why)) << "b's offer still served: " << why;
  withdrawLocalReads(*b);
  withdrawLocalReads(*b);  // idempotent
  if (before == 0) {
    EXPECT_EQ(attestThreads(), 0) << "the last withdrawal joins the socket's thread";
    PeerMemory gone;
    EXPECT_FALSE(attestPeer(h2.data(), *a, &gone, &why));
    EXPECT_NE(why.find("not reachable"), std::string::npos) << why;
  }
  // A new offer starts a new socket, under a new name.
  auto c = offerLocalReads(keyOf(11), h3.data(), &why);
  ASSERT_TRUE(c) << why;
  EXPECT_NE(0, std::memcmp(h3.data(), h1.data(), 16));
  withdrawLocalReads(*c);
}

TEST(LocalRead, ImpostorSocketWithoutTheKeyIsRefused) {
  // A local process that listens on a name it announces and answers the
  // protocol, but cannot prove the session key: it gets no proof back and
  // is never read.
  std::string why;
  std::array<uint8_t, kLocalHelloBytes> helloA{};
  auto a = offerLocalReads(keyOf(3), helloA.data(), &why);
  ASSERT_TRUE(a) << why;
  uint8_t name[16];
  for (int i = 0; i < 16; ++i) name[i] = static_cast<uint8_t>(0xA0 + i);
  const std::string text = [&] {
    std::string t = "mccl-attest-";
    static const char* d = "0123456789abcdef";
    for (uint8_t v : name) {
      t += d[v >> 4];
      t += d[v & 15];
    }
    return t;
  }();
  Socket listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, text.data(), text.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + text.size());
  ASSERT_EQ(::bind(listener.fd(), reinterpret_cast<sockaddr*>(&sa), len), 0);
  ASSERT_EQ(::listen(listener.fd(), 4), 0);
  std::atomic<size_t> readerSent{0};
  std::thread impostor([&] {
    Socket s(::accept(listener.fd(), nullptr, nullptr));
    uint8_t open[56];
    if (!s.recvAll(open, sizeof(open), Deadline::after(5s))) return;
    uint8_t answer[56] = {0x4D, 0x43, 0x4C, 0x41, 2};  // right kind, made-up proof
    for (size_t i = 8; i < sizeof(answer); ++i) answer[i] = static_cast<uint8_t>(i);
    s.sendAll(answer, sizeof(answer));
    uint8_t more[64];
    readerSent = s.recvSome(more, sizeof(more));  // 0: the reader hung up
  });
  LocalOffer fake;
  fake.token.fill(9);
  auto hello = helloOf(fake, name);
  PeerMemory mem;
  EXPECT_FALSE(attestPeer(hello.data(), *a, &mem, &why));
  EXPECT_NE(why.find("session key"), std::string::npos) << why;
  impostor.join();
  EXPECT_EQ(readerSent.load(), 0u) << "the reader must not answer an impostor's proof";
  EXPECT_FALSE(mem.isOpen());
}

// A forked child that waits until it is killed; killed and reaped on scope
// exit, whatever the test asserted.
struct Child {
  pid_t pid = -1;
  int gate[2] = {-1, -1};
  Child() {
    if (::pipe(gate) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      char c;
      (void)!::read(gate[0], &c, 1);
      ::_exit(0);
    }
  }
  void reap() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = 0;
  }
  ~Child() {
    reap();
    for (int fd : gate) {
      if (fd >= 0) ::close(fd);
    }
  }
};

TEST(LocalRead, PinnedPeerFailsOnceItsProcessHasExited) {
  // A forked child shares the cookie's address and bytes (made before the
  // fork): it is a peer this process can read, until it exits.
  uint64_t cookieAddr = 0;
  std::array<uint8_t, 16> cookie{};
  localCookie(&cookieAddr, &cookie);
  std::vector<uint8_t> data(100000);
  std::iota(data.begin(), data.end(), 3);
  Child child;
  ASSERT_GT(child.pid, 0);
  const pid_t pid = child.pid;
  PeerMemory mem;
  std::string why;
  auto wrong = cookie;
  wrong[3] ^= 1;  // a claim the process does not back: refused
  EXPECT_FALSE(mem.open(static_cast<uint32_t>(pid), cookieAddr, wrong, &why));
  EXPECT_NE(why.find("does not hold the cookie"), std::string::npos) << why;
  ASSERT_TRUE(mem.open(static_cast<uint32_t>(pid), cookieAddr, cookie, &why)) << why;
  std::vector<uint8_t> got(data.size());
  mem.read(reinterpret_cast<uintptr_t>(data.data()), got.data(), got.size());
  EXPECT_EQ(got, data);

  child.reap();
  try {
    mem.read(reinterpret_cast<uintptr_t>(data.data()), got.data(), got.size());
    ADD_FAILURE() << "a read from an exited process must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(pid)), std::string::npos) << e.what();
  }
  PeerMemory gone;
  EXPECT_FALSE(gone.open(static_cast<uint32_t>(pid), cookieAddr, cookie, &why))
      << "the child's pid is gone";
  EXPECT_FALSE(gone.isOpen());
}

TEST(LocalRead, PeerIsTheProcessTheKernelNamesNotOneItClaims) {
  // A forked child offers reads on its own attestation socket (a fork gets
  // a fresh one). Whatever it might claim, the reader pins the pid the
  // kernel gives for the socket and reads that process's memory.
  std::vector<uint8_t> data(4096, 0x11);
  int hp[2];
  ASSERT_EQ(::pipe(hp), 0);
  const pid_t server = ::fork();
  ASSERT_GE(server, 0);
  if (server == 0) {
    std::fill(data.begin(), data.end(), 0x22);  // this process's copy differs
    std::string why;
    uint8_t hello[kLocalHelloBytes];
    auto offer = offerLocalReads(keyOf(7), hello, &why);
    if (!offer || ::write(hp[1], hello, sizeof(hello)) != static_cast<ssize_t>(sizeof(hello))) {
      ::_exit(3);
    }
    ::pause();
    ::_exit(0);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{server};
  pollfd pfd{hp[0], POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "the serving child did not start";
  uint8_t hello[kLocalHelloBytes];
  ASSERT_EQ(::read(hp[0], hello, sizeof(hello)), static_cast<ssize_t>(sizeof(hello)));
  ::close(hp[0]);
  ::close(hp[1]);
  std::string why;
  uint8_t mine[kLocalHelloBytes];
  auto reader = offerLocalReads(keyOf(7), mine, &why);
  ASSERT_TRUE(reader) << why;
  EXPECT_NE(0, std::memcmp(mine, hello, 16)) << "the child serves on its own socket";
  PeerMemory mem;
  ASSERT_TRUE(attestPeer(hello, *reader, &mem, &why)) << why;
  EXPECT_EQ(mem.pid(), static_cast<uint32_t>(server));
  std::vector<uint8_t> got(data.size());
  mem.read(reinterpret_cast<uintptr_t>(data.data()), got.data(), got.size());
  EXPECT_EQ(got, std::vector<uint8_t>(data.size(), 0x22)) << "read from the child, not from us";
}

TEST(LocalRead, ReplayedOwnHelloIsAProtocolFault) {
  // The attack on the old probe: a peer sends this end its own hello back.
  Rig rig(4096, keyOf(8));
  std::vector<uint8_t> wire(kFrameHeaderBytes + kLocalHelloBytes);
  ASSERT_TRUE(rig.fake.recvAll(wire.data(), wire.size(), Deadline::after(5s)));
  FrameHeader h;
  std::string why;
  ASSERT_TRUE(decodeFrame(wire.data(), 1u << 20, &h, &why)) << why;
  ASSERT_EQ(h.type, FrameType::kLocalHello);
  h.src = 1;  // as if it were the peer's
  std::vector<uint8_t> back = encoded(h);
  back.insert(back.end(), wire.begin() + kFrameHeaderBytes, wire.end());
  rig.send(back);
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("replayed"), std::string::npos) << err;
  EXPECT_FALSE(rig.conn->readsPeer());
  EXPECT_FALSE(rig.conn->sendsByRef());
}

TEST(LocalRead, RemotePeerCannotTurnOnReferences) {
  // A peer that passed the handshake but is not on this host: its hello
  // names a socket that does not exist here; its LOCAL_OK and its REF frames
  // are protocol faults that end the connection.
  for (FrameType next : {FrameType::kLocalOk, FrameType::kRef}) {
    Rig rig(4096, keyOf(9));
    FrameHeader hh = controlHeader(FrameType::kLocalHello);
    hh.length = kLocalHelloBytes;
    std::vector<uint8_t> bytes = encoded(hh);
    for (size_t i = 0; i < kLocalHelloBytes; ++i) bytes.push_back(static_cast<uint8_t>(0xC0 + i));
    rig.send(bytes);
    if (next == FrameType::kLocalOk) {
      rig.send(encoded(controlHeader(FrameType::kLocalOk)));
    } else {
      FrameHeader r = dataHeader(8192);
      r.type = FrameType::kRef;
      auto ref = encoded(r);
      ref.resize(ref.size() + kRefDescriptorBytes, 0);
      rig.send(ref);
    }
    std::string err = rig.sink.waitEnd();
    EXPECT_NE(err.find(next == FrameType::kLocalOk ? "never proved" : "came by reference"),
              std::string::npos)
        << err;
    EXPECT_FALSE(rig.conn->sendsByRef());
    EXPECT_EQ(rig.sink.dests, 0);
  }
}

TEST(LocalRead, LargeFramesGoByReferenceAndCompleteOnTheCopy) {
  auto [a, b] = socketPair();
  RecordingSink senderSink, receiverSink;
  Connection sender(std::move(a), 0, senderSink, 1u << 20, 0, "to rank 0");
  Connection receiver(std::move(b), 1, receiverSink, 1u << 20, 0, "to rank 1");
  FrameHeader t0 = controlHeader(FrameType::kData), t1 = t0;
  t0.src = 1;  // the sender is "rank 1" as the receiver sees it
  t1.src = 0;
  sender.enableLocalReads(4096, t0, keyOf(5));  // one connection: one session key
  receiver.enableLocalReads(4096, t1, keyOf(5));
  sender.start();
  receiver.start();
  ASSERT_TRUE(waitFor([&] { return sender.sendsByRef() && receiver.readsPeer(); }));

  std::vector<uint8_t> big(300007), small(4095);
  std::iota(big.begin(), big.end(), 7);
  std::iota(small.begin(), small.end(), 1);
  CountingCallback cbBig, cbSmall;
  for (auto* v : {&big, &small}) {
    SendFrame f;
    FrameHeader h = dataHeader(static_cast<uint32_t>(v->size()));
    encodeFrame(h, f.header);
    f.payload = v->data();
    f.length = v->size();
    f.cb = v == &big ? &cbBig : &cbSmall;
    sender.post(f);
  }
  ASSERT_TRUE(receiverSink.waitFrames(2));
  EXPECT_EQ(receiverSink.done[0], big);
  EXPECT_EQ(receiverSink.done[1], small);
  ASSERT_TRUE(waitFor([&] { return cbBig.count() == 1 && cbSmall.count() == 1; }));
  EXPECT_EQ(cbBig.error, "");
  EXPECT_EQ(sender.refFramesSent(), 1u) << "only the frame of >= 4096 bytes goes by reference";
  sender.close();
  receiver.close();
  EXPECT_EQ(cbBig.count(), 1) << "a REF's callback runs exactly once";
}

// A group that fails right after the connection starts (the abort relay
// opens connections to carry its ABORT) drops its own queued traffic, not
// the connection's hello: a shrunk group takes the connection over.
TEST(LocalRead, GroupAbortKeepsTheQueuedHello) {
  for (int round = 0; round < 20; ++round) {
    auto [a, b] = socketPair();
    RecordingSink senderSink, receiverSink;
    Connection sender(std::move(a), 0, senderSink, 1u << 20, 0, "to rank 0");
    Connection receiver(std::move(b), 1, receiverSink, 1u << 20, 0, "to rank 1");
    FrameHeader t0 = controlHeader(FrameType::kData), t1 = t0;
    t0.src = 1;
    t1.src = 0;
    sender.enableLocalReads(4096, t0, keyOf(5));
    receiver.enableLocalReads(4096, t1, keyOf(5));
    receiver.start();
    sender.start();
    sender.postGroupAbort(controlHeader(FrameType::kAbort), Error(ErrorKind::kRemote, "group 77 failed"));
    ASSERT_TRUE(waitFor([&] { return sender.sendsByRef() && receiver.readsPeer(); })) << "round " << round;
    sender.close();
    receiver.close();
  }
}

TEST(LocalRead, ReferenceThatWasNotAgreedIsAProtocolFault) {
  for (size_t reads : {size_t{0}, size_t{4096}}) {  // off, and on without a hello
    Rig rig(reads);
    FrameHeader h = dataHeader(8192);
    h.type = FrameType::kRef;
    auto bytes = encoded(h);
    bytes.resize(bytes.size() + kRefDescriptorBytes, 0);
    rig.send(bytes);
    std::string err = rig.sink.waitEnd();
    EXPECT_NE(err.find("came by reference"), std::string::npos) << err;
    EXPECT_EQ(rig.sink.dests, 0) << "nothing may be asked for before the refusal";
  }
}

TEST(LocalRead, SameHostControlFramesNeedAnOffer) {
  Rig rig;  // local reads off
  rig.send(encoded(controlHeader(FrameType::kLocalOk)));
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("offered no local reads"), std::string::npos) << err;
}

TEST(LocalRead, UnknownRefDoneTokenIsAProtocolFault) {
  Rig rig(4096);
  rig.send(encoded(controlHeader(FrameType::kRefDone, 99)));
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("REF_DONE for token 99"), std::string::npos) << err;
}

TEST(LocalRead, OfferedPayloadFailsWhenThePeerLeavesWithoutCopying) {
  Rig rig(4096, keyOf(10));
  // The fake peer is a local reader holding the session key: it attests the
  // connection's end through the kernel, then says it reads it.
  std::vector<uint8_t> helloFrame(kFrameHeaderBytes + kLocalHelloBytes);
  ASSERT_TRUE(rig.fake.recvAll(helloFrame.data(), helloFrame.size(), Deadline::after(5s)));
  std::string why;
  uint8_t fakeHello[kLocalHelloBytes];
  auto fakeOffer = offerLocalReads(keyOf(10), fakeHello, &why);
  ASSERT_TRUE(fakeOffer) << why;
  PeerMemory mem;
  ASSERT_TRUE(attestPeer(helloFrame.data() + kFrameHeaderBytes, *fakeOffer, &mem, &why)) << why;
  rig.send(encoded(controlHeader(FrameType::kLocalOk)));  // "I can read you"
  ASSERT_TRUE(waitFor([&] { return rig.conn->sendsByRef(); }));
  std::vector<uint8_t> payload(65536, 0x42);
  CountingCallback cb;
  SendFrame f;
  encodeFrame(dataHeader(static_cast<uint32_t>(payload.size())), f.header);
  f.payload = payload.data();
  f.length = payload.size();
  f.cb = &cb;
  rig.conn->post(f);
  // The fake peer reads the REF (header + descriptor), then leaves without
  // a REF_DONE.
  std::vector<uint8_t> wire(kFrameHeaderBytes + kRefDescriptorBytes);
  ASSERT_TRUE(rig.fake.recvAll(wire.data(), wire.size(), Deadline::after(5s)));
  FrameHeader ref;
  ASSERT_TRUE(decodeFrame(wire.data(), 1u << 20, &ref, &why)) << why;
  EXPECT_EQ(ref.type, FrameType::kRef);
  EXPECT_EQ(ref.length, payload.size());
  const uint8_t* desc = wire.data() + kFrameHeaderBytes;
  EXPECT_EQ(getLE<uint64_t>(desc), reinterpret_cast<uintptr_t>(payload.data()));
  EXPECT_EQ(cb.count(), 0) << "a REF completes only when the peer has copied it";
  rig.fake.close();
  rig.sink.waitEnd();
  ASSERT_TRUE(waitFor([&] { return cb.count() == 1; }));
  // The callback carries the link's end: the cause, naming the link.
  EXPECT_NE(cb.error.find("connection to rank 1"), std::string::npos) << cb.error;
  EXPECT_NE(cb.error.find("without shutting down"), std::string::npos) << cb.error;
}

}  // namespace
}  // namespace mccl
