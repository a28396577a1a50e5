#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "transport/frame.h"
#include "util/bytes.h"

namespace mccl {
namespace {

FrameHeader sample() {
  FrameHeader h;
  h.type = FrameType::kData;
  h.group = 0x1122334455667788ull;
  h.seq = 42;
  h.offset = 4096;
  h.msgBytes = 10000;
  h.count = 2500;
  h.slot = 7;
  h.length = 4096;
  h.root = 3;
  h.src = 2;
  h.op = OpKind::kAllreduce;
  h.dtype = DataType::kFloat32;
  h.redop = ReduceOp::kMax;
  h.algo = 1;
  return h;
}

TEST(Frame, RoundTrip) {
  uint8_t buf[kFrameHeaderBytes];
  FrameHeader h = sample();
  encodeFrame(h, buf);
  FrameHeader d;
  std::string why;
  ASSERT_TRUE(decodeFrame(buf, 1 << 20, &d, &why)) << why;
  EXPECT_EQ(d.group, h.group);
  EXPECT_EQ(d.seq, h.seq);
  EXPECT_EQ(d.offset, h.offset);
  EXPECT_EQ(d.msgBytes, h.msgBytes);
  EXPECT_EQ(d.count, h.count);
  EXPECT_EQ(d.slot, h.slot);
  EXPECT_EQ(d.length, h.length);
  EXPECT_EQ(d.root, h.root);
  EXPECT_EQ(d.src, h.src);
  EXPECT_EQ(d.op, h.op);
  EXPECT_EQ(d.dtype, h.dtype);
  EXPECT_EQ(d.redop, h.redop);
  EXPECT_EQ(d.algo, h.algo);
  // Little-endian on the wire whatever the host.
  EXPECT_EQ(buf[16], 42);
  EXPECT_EQ(getLE<uint32_t>(buf), kFrameMagic);
}

void expectRejected(uint8_t* buf, const char* needle) {
  FrameHeader d;
  std::string why;
  EXPECT_FALSE(decodeFrame(buf, 1 << 20, &d, &why));
  EXPECT_NE(why.find(needle), std::string::npos) << why;
}

TEST(Frame, RejectsEveryBadField) {
  uint8_t buf[kFrameHeaderBytes];
  auto fresh = [&](FrameHeader h) { encodeFrame(h, buf); };
  fresh(sample()); buf[0] ^= 1; expectRejected(buf, "magic");
  fresh(sample()); buf[4] = 9; expectRejected(buf, "version");
  fresh(sample()); buf[6] = 77; expectRejected(buf, "type");
  fresh(sample()); buf[7] = 0x80; expectRejected(buf, "flags");
  fresh(sample()); buf[64] = 200; expectRejected(buf, "op kind");
  fresh(sample()); buf[65] = 99; expectRejected(buf, "dtype");
  fresh(sample()); buf[66] = 99; expectRejected(buf, "reduce op");
  fresh(sample()); buf[70] = 1; expectRejected(buf, "checksum field is set without the checksum flag");
  FrameHeader big = sample();
  big.length = 2 << 20;
  big.msgBytes = 4 << 20;
  big.offset = 0;
  fresh(big); expectRejected(buf, "exceeds");
  FrameHeader outside = sample();
  outside.offset = 8000;  // 8000 + 4096 > 10000
  fresh(outside); expectRejected(buf, "outside");
  FrameHeader wrap = sample();
  wrap.offset = ~0ull - 10;  // would overflow offset + length
  fresh(wrap); expectRejected(buf, "outside");
  FrameHeader closeWithPayload = sample();
  closeWithPayload.type = FrameType::kClose;
  fresh(closeWithPayload); expectRejected(buf, "close frame");
  FrameHeader hugeAbort = sample();
  hugeAbort.type = FrameType::kAbort;
  hugeAbort.length = kMaxAbortMessage + 1;
  fresh(hugeAbort); expectRejected(buf, "abort message");
}

TEST(Frame, RandomBytesNeverCrashAndRarelyPass) {
  std::mt19937 rng(1);
  uint8_t buf[kFrameHeaderBytes];
  int passed = 0;
  for (int i = 0; i < 200000; ++i) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    FrameHeader d;
    std::string why;
    passed += decodeFrame(buf, 1 << 20, &d, &why) ? 1 : 0;
  }
  EXPECT_EQ(passed, 0);  // the magic alone makes a random pass ~2^-32
}

}  // namespace
}  // namespace mccl
