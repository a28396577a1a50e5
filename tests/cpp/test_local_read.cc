// Same-host reads (transport/local_read.h): the probe that decides whether a
// peer's memory is readable, REF frames between two real connections, and a
// fake peer that breaks the protocol (a REF nobody agreed to, an unknown
// REF_DONE token, closing before it copied a payload offered to it), and a
// pinned peer process that exits.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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

TEST(LocalRead, ProbeReadsThisProcessAndRejectsStrangers) {
  const LocalIdentity self = localIdentity();
  std::string why;
  EXPECT_TRUE(canReadPeer(self, &why)) << why;

  LocalIdentity other = self;
  other.cookie[3] ^= 1;  // same pid and address, different bytes: another process
  EXPECT_FALSE(canReadPeer(other, &why));
  EXPECT_NE(why.find("another process"), std::string::npos) << why;

  other = self;
  other.bootId[0] ^= 1;
  EXPECT_FALSE(canReadPeer(other, &why));
  EXPECT_NE(why.find("another host"), std::string::npos) << why;

  other = self;
  other.netNs += 1;
  EXPECT_FALSE(canReadPeer(other, &why));
  EXPECT_NE(why.find("network namespace"), std::string::npos) << why;

  other = self;
  other.pid = 0x3FFFFFF0;  // above any pid_max: no such process
  EXPECT_FALSE(canReadPeer(other, &why));
  EXPECT_NE(why.find("process_vm_readv"), std::string::npos) << why;

  uint8_t wire[kLocalHelloBytes];
  encodeLocalHello(self, wire);
  const LocalIdentity back = decodeLocalHello(wire);
  EXPECT_EQ(back.bootId, self.bootId);
  EXPECT_EQ(back.netNs, self.netNs);
  EXPECT_EQ(back.pid, self.pid);
  EXPECT_EQ(back.cookieAddr, self.cookieAddr);
  EXPECT_EQ(back.cookie, self.cookie);
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
  LocalIdentity peer = localIdentity();
  std::vector<uint8_t> data(100000);
  std::iota(data.begin(), data.end(), 3);
  Child child;
  ASSERT_GT(child.pid, 0);
  const pid_t pid = child.pid;
  peer.pid = static_cast<uint32_t>(pid);
  PeerMemory mem;
  std::string why;
  ASSERT_TRUE(mem.open(peer, &why)) << why;
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
  EXPECT_FALSE(gone.open(peer, &why)) << "the child's pid is gone";
  EXPECT_FALSE(gone.isOpen());
}

TEST(LocalRead, LargeFramesGoByReferenceAndCompleteOnTheCopy) {
  auto [a, b] = socketPair();
  RecordingSink senderSink, receiverSink;
  Connection sender(std::move(a), 0, senderSink, 1u << 20, 0, "to rank 0");
  Connection receiver(std::move(b), 1, receiverSink, 1u << 20, 0, "to rank 1");
  FrameHeader t0 = controlHeader(FrameType::kData), t1 = t0;
  t0.src = 1;  // the sender is "rank 1" as the receiver sees it
  t1.src = 0;
  sender.enableLocalReads(4096, t0);
  receiver.enableLocalReads(4096, t1);
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
  Rig rig(4096);
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
  // The fake peer reads the hello and the REF (header + descriptor), then
  // leaves without a REF_DONE.
  std::vector<uint8_t> wire(kFrameHeaderBytes + kLocalHelloBytes + kFrameHeaderBytes +
                            kRefDescriptorBytes);
  ASSERT_TRUE(rig.fake.recvAll(wire.data(), wire.size(), Deadline::after(5s)));
  FrameHeader ref;
  std::string why;
  ASSERT_TRUE(decodeFrame(wire.data() + kFrameHeaderBytes + kLocalHelloBytes, 1u << 20, &ref, &why))
      << why;
  EXPECT_EQ(ref.type, FrameType::kRef);
  EXPECT_EQ(ref.length, payload.size());
  const uint8_t* desc = wire.data() + 2 * kFrameHeaderBytes + kLocalHelloBytes;
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
