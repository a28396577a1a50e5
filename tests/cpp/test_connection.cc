// In-process fault injection at the transport layer: a Connection reads
// from a fake peer (a raw loopback socket this test writes bytes into) that
// sends malformed headers, absurd lengths, corrupted payloads, or closes in
// the middle of a frame. Every case must end the connection once, with an
// error that names the link, before any payload memory is asked for when
// the header is bad.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <netinet/tcp.h>

#include "comm/config.h"
#include "connection_rig.h"
#include "transport/socket.h"
#include "util/error.h"
#include "transport/connection.h"
#include "transport/frame.h"
#include "util/bytes.h"
#include "util/crc32c.h"

namespace mccl {
namespace {

TEST(FakePeer, MalformedHeaderEndsTheLinkBeforeAnyAllocation) {
  Rig rig;
  auto bytes = encoded(dataHeader(64));
  bytes[0] ^= 0xFF;  // bad magic
  rig.send(bytes);
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("connection to rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("malformed frame"), std::string::npos) << err;
  EXPECT_EQ(rig.sink.dests, 0);
}

TEST(FakePeer, AbsurdLengthIsRejectedBeforeAnyAllocation) {
  Rig rig;
  FrameHeader h = dataHeader(64);
  h.length = 0xFFFFFFF0u;
  h.msgBytes = 0xFFFFFFF0u;
  rig.send(encoded(h));
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("exceeds the frame limit"), std::string::npos) << err;
  EXPECT_EQ(rig.sink.dests, 0);
}

TEST(FakePeer, WrongSourceRank) {
  Rig rig;
  FrameHeader h = dataHeader(0);
  h.src = 5;
  rig.send(encoded(h));
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("claims to come from rank 5"), std::string::npos) << err;
}

TEST(FakePeer, ClosesInTheMiddleOfAHeader) {
  Rig rig;
  auto bytes = encoded(dataHeader(64));
  bytes.resize(30);
  rig.send(bytes);
  rig.fake.close();
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("in the middle of a frame"), std::string::npos) << err;
  EXPECT_EQ(rig.sink.dests, 0);
}

TEST(FakePeer, ClosesInTheMiddleOfAPayload) {
  for (uint32_t length : {1000u, 300000u}) {  // buffered and direct reads
    Rig rig;
    auto bytes = encoded(dataHeader(length));
    bytes.resize(bytes.size() + 100, 0xAB);
    rig.send(bytes);
    rig.fake.close();
    std::string err = rig.sink.waitEnd();
    EXPECT_NE(err.find("in the middle of a frame"), std::string::npos) << err;
    EXPECT_EQ(rig.sink.aborted, 1) << "the sink must learn that its buffer was not filled";
    EXPECT_TRUE(rig.sink.done.empty());
  }
}

TEST(FakePeer, ExitWithoutGoodbye) {
  Rig rig;
  rig.fake.close();
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("without shutting down"), std::string::npos) << err;
}

// A SendCallback that records its one call.
struct RecordingCallback : SendCallback {
  void sendDone(const Error* err) override {
    std::lock_guard<std::mutex> lock(mu);
    ++calls;
    error = err ? err->what() : "";
  }
  std::mutex mu;
  int calls = 0;
  std::string error;
};

// The posting thread writes the first part of a large frame itself (the
// fake peer reads nothing, so the socket takes only part), and the
// connection fails before that thread can hand the rest to the send
// thread. The frame must fail with the connection, at once: queued behind
// a send thread that has left, it would wait for close().
TEST(InlineWrite, PartlyWrittenFrameFailsWithTheConnection) {
  RecordingCallback cb;  // outlives the rig
  Rig* self = nullptr;
  int windows = 0;
  Rig rig(0, Digest{}, [&](Connection& c) {
    c.setAfterInlineWriteForTesting([&] {
      if (windows++ > 0) return;
      self->fake.close();  // the peer exits: the receive thread fails the link
      EXPECT_NE(self->sink.waitEnd().find("connection to rank 1"), std::string::npos);
    });
  }, size_t{64} << 20);
  self = &rig;
  std::vector<uint8_t> payload(size_t{32} << 20, 7);
  FrameHeader h = dataHeader(static_cast<uint32_t>(payload.size()));
  h.src = 0;
  SendFrame f;
  encodeFrame(h, f.header);
  f.payload = payload.data();
  f.length = payload.size();
  f.cb = &cb;
  rig.conn->post(f);
  EXPECT_EQ(windows, 1) << "the frame was not written by the posting thread";
  std::lock_guard<std::mutex> lock(cb.mu);
  EXPECT_EQ(cb.calls, 1) << "the partly written frame was left queued on a failed connection";
  EXPECT_NE(cb.error.find("connection to rank 1"), std::string::npos) << cb.error;
}

// start() runs under its caller's locks (Peers::adopt holds the peer's):
// it never writes on the caller's thread, where a failed write would
// report through the sink. Its same-host hello goes by the send thread.
TEST(InlineWrite, StartNeverWritesOnTheCallersThread) {
  std::atomic<int> inlineWrites{0};
  Rig rig(1024, Digest{}, [&](Connection& c) {
    c.setAfterInlineWriteForTesting([&] { ++inlineWrites; });
  }, size_t{1} << 20);
  EXPECT_EQ(inlineWrites.load(), 0);
  uint8_t probe[kLocalHelloBytes];
  std::string unavailable;
  if (offerLocalReads(Digest{}, probe, &unavailable) == nullptr) {
    GTEST_SKIP() << "no same-host reads here, so no hello to send: " << unavailable;
  }
  {
    uint8_t raw[kFrameHeaderBytes];
    ASSERT_TRUE(rig.fake.recvAll(raw, sizeof(raw), Deadline::after(5s)));
    FrameHeader h;
    std::string why;
    ASSERT_TRUE(decodeFrame(raw, 1u << 20, &h, &why)) << why;
    EXPECT_EQ(h.type, FrameType::kLocalHello);
  }
}

TEST(Checksum, KnownVectorsAndTheFastPathAgree) {
  const char* nine = "123456789";
  EXPECT_EQ(crc32c(nine, 9), 0xE3069283u);  // RFC 3720, appendix B.4
  EXPECT_EQ(crc32cPortable(nine, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  std::vector<uint8_t> data(1 << 16);
  std::iota(data.begin(), data.end(), 3);
  for (size_t len : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{13}, data.size()}) {
    EXPECT_EQ(crc32c(data.data(), len), crc32cPortable(data.data(), len)) << len;
  }
  // Continuation: the CRC of a whole equals the CRC continued over its parts.
  EXPECT_EQ(crc32c(data.data() + 100, 900, crc32c(data.data(), 100)), crc32c(data.data(), 1000));
}

TEST(Checksum, SealedFramesArriveIntactAndAreVerified) {
  auto [a, b] = socketPair();
  RecordingSink senderSink, receiverSink;
  Connection sender(std::move(a), 0, senderSink, 1u << 20, 0, "to rank 0");
  Connection receiver(std::move(b), 1, receiverSink, 1u << 20, 0, "to rank 1");
  sender.setChecksum(true);
  sender.start();
  receiver.start();
  std::vector<uint8_t> payload(100003);
  std::iota(payload.begin(), payload.end(), 11);
  SendFrame f;
  encodeFrame(dataHeader(static_cast<uint32_t>(payload.size())), f.header);
  f.payload = payload.data();
  f.length = payload.size();
  sender.post(f);
  ASSERT_TRUE(receiverSink.waitFrames(1));
  EXPECT_TRUE(receiverSink.headers[0].hasChecksum());
  EXPECT_EQ(receiverSink.headers[0].checksum, crc32c(payload.data(), payload.size()));
  EXPECT_EQ(receiverSink.done[0], payload);
  sender.close();
  receiver.close();
}

TEST(Checksum, CorruptedPayloadFailsNamingTheLink) {
  Rig rig;
  std::vector<uint8_t> payload(4096, 0x5A);
  FrameHeader h = dataHeader(static_cast<uint32_t>(payload.size()));
  h.flags |= kFlagChecksum;
  h.checksum = crc32c(payload.data(), payload.size());
  payload[1234] ^= 0x10;  // one bit flipped "on the wire"
  auto bytes = encoded(h);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  rig.send(bytes);
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("connection to rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("CRC32C mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("allreduce #5"), std::string::npos) << err;
  EXPECT_EQ(rig.sink.aborted, 1);
  EXPECT_TRUE(rig.sink.done.empty()) << "a corrupted payload must never be delivered";
}

TEST(Checksum, FieldWithoutFlagIsMalformed) {
  uint8_t buf[kFrameHeaderBytes];
  encodeFrame(dataHeader(8), buf);
  putLE<uint32_t>(buf + kChecksumOffset, 1234);
  FrameHeader h;
  std::string why;
  EXPECT_FALSE(decodeFrame(buf, 1 << 20, &h, &why));
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
}

}  // namespace
}  // namespace mccl

namespace mccl {
namespace {

// MCCL_TCP_CONGESTION: a well-formed name the kernel offers is set on the
// connection (reno is always built in); anything else is refused by name at
// group creation (a connection made after the host's settings changed keeps
// the system's default, with a warning).
TEST(Socket, CongestionControlIsSetOrRefusedByName) {
#if defined(__linux__)
  Socket probe(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(probe.valid());
  probe.setCongestion("reno");
  char got[16] = {};
  socklen_t len = sizeof(got);
  ASSERT_EQ(::getsockopt(probe.fd(), IPPROTO_TCP, TCP_CONGESTION, got, &len), 0);
  EXPECT_STREQ(got, "reno");
  CommConfig c;
  c.tcpCongestion = "reno";
  EXPECT_NO_THROW(c.validate());
  auto refused = [&](const std::string& name, const std::string& words) {
    c.tcpCongestion = name;
    try {
      c.validate();
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << name;
      EXPECT_NE(std::string(e.what()).find("MCCL_TCP_CONGESTION=" + name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused("nosuchcc", "this kernel offers");
  refused("cubic;rm", "not a congestion control name");
  refused("a_name_too_long_x", "not a congestion control name");
  c.tcpCongestion.clear();
  EXPECT_NO_THROW(c.validate());
#else
  GTEST_SKIP() << "TCP_CONGESTION is Linux only";
#endif
}

// MCCL_KEEPALIVE_S: probes from halfway through, a sixth apart, enough to
// fill the rest; unacknowledged data fails at the same time. (The netlab
// test cuts a cable under idle connections and sees them fail at it.)
TEST(Socket, WireBytesCountWhatSocketsSendAndReceive) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Socket a(fds[0]);
  Socket b(fds[1]);
  const WireBytes before = wireBytes();
  std::vector<char> out(1000, 'x'), in(1000);
  a.sendAll(out.data(), out.size(), Deadline::never());
  ASSERT_TRUE(b.recvAll(in.data(), in.size(), Deadline::never()));
  char more[7] = "abcdef";
  iovec iov[2] = {{more, 3}, {more + 3, 4}};
  a.sendIov(iov, 2);
  EXPECT_EQ(b.recvSome(in.data(), in.size()), 7u);
  const WireBytes after = wireBytes();
  // Other threads of this process may also send (ctest runs each test alone).
  EXPECT_GE(after.sent - before.sent, 1007u);
  EXPECT_GE(after.received - before.received, 1007u);
}

TEST(Socket, DeadPeerTimeoutSetsKeepaliveAndUserTimeout) {
#if defined(__linux__)
  auto opt = [](const Socket& s, int level, int name) {
    int v = -1;
    socklen_t len = sizeof(v);
    EXPECT_EQ(::getsockopt(s.fd(), level, name, &v, &len), 0);
    return v;
  };
  Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(s.valid());
  s.setDeadPeerTimeout(0);
  EXPECT_EQ(opt(s, SOL_SOCKET, SO_KEEPALIVE), 0);
  EXPECT_EQ(opt(s, IPPROTO_TCP, TCP_USER_TIMEOUT), 0);
  // (idle s, probe interval s, probes, user timeout ms) for each setting
  auto timers = [&] {
    return std::vector<int>{opt(s, IPPROTO_TCP, TCP_KEEPIDLE), opt(s, IPPROTO_TCP, TCP_KEEPINTVL),
                            opt(s, IPPROTO_TCP, TCP_KEEPCNT), opt(s, IPPROTO_TCP, TCP_USER_TIMEOUT)};
  };
  s.setDeadPeerTimeout(30);
  EXPECT_EQ(opt(s, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(timers(), (std::vector<int>{15, 5, 3, 30000}));
  s.setDeadPeerTimeout(1);
  EXPECT_EQ(timers(), (std::vector<int>{1, 1, 1, 1000}));
  CommConfig c;
  EXPECT_EQ(c.keepaliveS, 30);
  c.keepaliveS = -1;
  EXPECT_THROW(c.validate(), Error);
  c.keepaliveS = 3601;
  EXPECT_THROW(c.validate(), Error);
#else
  GTEST_SKIP() << "checked through Linux's socket options";
#endif
}

}  // namespace
}  // namespace mccl
