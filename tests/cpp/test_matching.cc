// The matching engine on synthetic frames, without sockets.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/matching.h"

namespace mccl {
namespace {

Matching::Context ctx() {
  Matching::Context c;
  c.rank = 0;
  c.size = 4;
  c.group = "group 'unit'";
  c.peerName = [](int r) { return strCat("rank ", r); };
  return c;
}

OpSignature sig(uint64_t count = 8) {
  OpSignature s;
  s.op = OpKind::kAllreduce;
  s.dtype = DataType::kFloat32;
  s.count = count;
  s.algo = Algo::kRing;
  return s;
}

FrameHeader frame(uint64_t seq, uint32_t slot, uint32_t src, uint64_t offset, uint32_t len,
                  uint64_t msgBytes, const OpSignature& s = sig()) {
  FrameHeader h;
  h.seq = seq;
  h.slot = slot;
  h.src = src;
  h.offset = offset;
  h.length = len;
  h.msgBytes = msgBytes;
  s.stamp(&h);
  return h;
}

// Delivers `data` as the payload of h.
void deliver(Matching& m, const FrameHeader& h, const void* data) {
  void* dst = m.incoming(h);
  if (h.length > 0) std::memcpy(dst, data, h.length);
  m.incomingDone(h, dst, true);
}

TEST(Matching, PostedThenArrivesInParts) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  m.beginOp(0, sig());
  char out[8] = {0};
  auto r = std::make_shared<RecvRequest>(MsgKey{0, 0, 3, 1}, out, 8, sig());
  m.post(r);
  deliver(m, frame(0, 3, 1, 4, 4, 8), "EFGH");
  EXPECT_FALSE(r->done());
  deliver(m, frame(0, 3, 1, 0, 4, 8), "ABCD");
  ASSERT_TRUE(r->done());
  EXPECT_EQ(std::string(out, 8), "ABCDEFGH");
}

TEST(Matching, ArrivesBeforePostAndBeforeOpStarts) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  deliver(m, frame(0, 1, 2, 0, 4, 4), "WXYZ");  // op 0 not started: buffered
  EXPECT_EQ(m.unexpectedBytes(), 4u);
  m.beginOp(0, sig());
  char out[4];
  auto r = std::make_shared<RecvRequest>(MsgKey{0, 0, 1, 2}, out, 4, sig());
  m.post(r);
  ASSERT_TRUE(r->done());
  EXPECT_EQ(std::string(out, 4), "WXYZ");
  EXPECT_EQ(m.unexpectedBytes(), 0u);
}

TEST(Matching, SignatureMismatchNamesBothSides) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  m.beginOp(0, sig(8));
  try {
    m.incoming(frame(0, 0, 1, 0, 4, 4, sig(9)));
    ADD_FAILURE();
  } catch (const Error& e) {
    std::string s = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(s.find("count=8"), std::string::npos) << s;
    EXPECT_NE(s.find("count=9"), std::string::npos) << s;
    EXPECT_NE(s.find("element count differs"), std::string::npos) << s;
  }
  // A buffered frame is checked when its op begins.
  Matching m2(ctx(), 1 << 20, pool);
  deliver(m2, frame(0, 0, 1, 0, 4, 4, sig(9)), "abcd");
  EXPECT_THROW(m2.beginOp(0, sig(8)), Error);
}

TEST(Matching, FrameForCompletedOpIsAnError) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  m.beginOp(0, sig());
  m.endOp(0);
  EXPECT_THROW(m.incoming(frame(0, 0, 1, 0, 4, 4)), Error);
}

TEST(Matching, BudgetBlocksUntilAReceiveIsPosted) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 8, pool);
  m.beginOp(0, sig());
  deliver(m, frame(0, 0, 1, 0, 8, 8), "12345678");  // fills the budget
  std::atomic<bool> delivered{false};
  std::thread t([&] {
    deliver(m, frame(0, 1, 1, 0, 8, 8), "abcdefgh");
    delivered = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(delivered.load());  // over budget: the reader waits
  char out[8];
  auto r = std::make_shared<RecvRequest>(MsgKey{0, 0, 1, 1}, out, 8, sig());
  m.post(r);  // posted: the blocked frame goes straight in
  t.join();
  ASSERT_TRUE(r->done());
  EXPECT_EQ(std::string(out, 8), "abcdefgh");
}

TEST(Matching, AnySourceTakesEarliestInPairOrder) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  OpSignature p2p;
  p2p.op = OpKind::kSendRecv;
  p2p.dtype = DataType::kUInt8;
  p2p.count = 2;
  auto pf = [&](uint64_t seq, uint32_t src, const char* d) {
    FrameHeader h = frame(seq, 5, src, 0, 2, 2, p2p);
    h.flags = kFlagP2P;
    deliver(m, h, d);
  };
  pf(1, 3, "b3");  // counter 1 from rank 3 arrives before counter 0
  pf(0, 2, "a2");
  pf(0, 3, "a3");
  char out[2];
  for (const char* want : {"a2", "a3", "b3"}) {
    auto r = std::make_shared<RecvRequest>(MsgKey{1, 0, 5, 0}, out, 2, p2p);
    m.postAnySource(r);
    ASSERT_TRUE(r->done());
    EXPECT_EQ(std::string(out, 2), want);
  }
}

// Two messages of one pair may arrive out of order (striped over several
// connections): receives from any rank that wait when the later one arrives
// take it once the earlier one is matched, whichever call matched it.
OpSignature p2pSig() {
  OpSignature s;
  s.op = OpKind::kSendRecv;
  s.dtype = DataType::kUInt8;
  s.count = 2;
  return s;
}

FrameHeader p2pFrame(uint64_t seq, uint32_t src, FrameType type = FrameType::kData) {
  FrameHeader h = frame(seq, 5, src, 0, type == FrameType::kRts ? 0 : 2, 2, p2pSig());
  h.flags = kFlagP2P;
  h.type = type;
  return h;
}

TEST(Matching, WaitingAnySourceTakesAMessageThatBecomesNextLater) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  char a[2] = {0}, b[2] = {0};
  auto r1 = std::make_shared<RecvRequest>(MsgKey{1, 0, 5, 0}, a, 2, p2pSig());
  auto r2 = std::make_shared<RecvRequest>(MsgKey{1, 0, 5, 0}, b, 2, p2pSig());
  m.postAnySource(r1);
  m.postAnySource(r2);
  deliver(m, p2pFrame(1, 3), "b3");  // rank 3's second message first: buffered
  EXPECT_FALSE(r1->done());
  deliver(m, p2pFrame(0, 3), "a3");
  ASSERT_TRUE(r1->done());
  ASSERT_TRUE(r2->done()) << "the buffered second message was not given to the waiting receive";
  EXPECT_EQ(std::string(a, 2), "a3");
  EXPECT_EQ(std::string(b, 2), "b3");
  EXPECT_EQ(m.unexpectedBytes(), 0u);
}

TEST(Matching, WaitingAnySourceTakesAnAnnouncedMessageAndItsClearToSendIsSent) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  std::vector<std::tuple<uint32_t, uint64_t, uint32_t>> cts;
  m.setCtsDue([&](uint32_t src, uint64_t seq, uint32_t tag) { cts.emplace_back(src, seq, tag); });
  char a[2] = {0}, b[2] = {0};
  auto r1 = std::make_shared<RecvRequest>(MsgKey{1, 0, 5, 0}, a, 2, p2pSig());
  auto r2 = std::make_shared<RecvRequest>(MsgKey{1, 0, 5, 0}, b, 2, p2pSig());
  m.postAnySource(r1);
  m.postAnySource(r2);
  EXPECT_FALSE(m.incomingRts(p2pFrame(1, 2, FrameType::kRts)));  // announced out of order: buffered
  deliver(m, p2pFrame(0, 2), "x2");
  ASSERT_TRUE(r1->done());
  ASSERT_EQ(cts.size(), 1u);
  EXPECT_EQ(cts[0], std::make_tuple(2u, uint64_t{1}, 5u));
  deliver(m, p2pFrame(1, 2), "y2");  // the data its clear-to-send asked for
  ASSERT_TRUE(r2->done());
  EXPECT_EQ(std::string(b, 2), "y2");
}

TEST(Matching, ASpecificReceiveMovesThePairOnForAWaitingAnySource) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  char any[2] = {0}, spec[2] = {0};
  auto ra = std::make_shared<RecvRequest>(MsgKey{1, 0, 5, 0}, any, 2, p2pSig());
  m.postAnySource(ra);
  deliver(m, p2pFrame(1, 3), "n1");  // rank 3's message 1 before its message 0
  auto rs = std::make_shared<RecvRequest>(MsgKey{1, 0, 5, 3}, spec, 2, p2pSig());
  m.post(rs);  // takes rank 3's message 0 (not here yet): message 1 is next
  ASSERT_TRUE(ra->done());
  EXPECT_EQ(std::string(any, 2), "n1");
  EXPECT_FALSE(rs->done());
  deliver(m, p2pFrame(0, 3), "n0");
  ASSERT_TRUE(rs->done());
  EXPECT_EQ(std::string(spec, 2), "n0");
}

TEST(Matching, FailAllWaitsForPayloadsInFlight) {
  ScratchPool pool(1 << 24);
  Matching m(ctx(), 1 << 20, pool);
  m.beginOp(0, sig());
  char out[8];
  auto r = std::make_shared<RecvRequest>(MsgKey{0, 0, 0, 1}, out, 8, sig());
  m.post(r);
  FrameHeader h = frame(0, 0, 1, 0, 8, 8);
  void* dst = m.incoming(h);  // a reader is now writing into `out`
  m.failAll(Error(ErrorKind::kRemote, "peer died"));
  EXPECT_FALSE(r->done());    // not while the write may be going on
  m.incomingDone(h, dst, false);
  ASSERT_TRUE(r->done());
  ASSERT_NE(r->error(), nullptr);
  EXPECT_NE(std::string(r->error()->what()).find("peer died"), std::string::npos);
}

}  // namespace
}  // namespace mccl
