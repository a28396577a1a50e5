// Sealed frames (MCCL_WIRE_SECURITY, Connection::enableSealing): two real
// connections exchange frames of every size exactly, encrypted payloads do
// not appear on the wire, and a fake peer that holds the right key still
// cannot alter, replay or reorder a frame, nor inject one without the key:
// each ends the link as a protocol fault before the frame is delivered (and,
// below 64 KiB, before it is written anywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "connection_rig.h"
#include "util/aead.h"
#include "util/bytes.h"

namespace mccl {
namespace {

Digest keyOf(uint8_t b) {
  Digest k;
  k.fill(b);
  return k;
}

// libcrypto is a test requirement (scripts/setup.sh installs it): a
// missing one fails here rather than skipping the sealing tests.
bool haveCrypto() {
  std::string why;
  const bool ok = Aead::available(&why);
  if (!ok) ADD_FAILURE() << why;
  return ok;
}

// A frame as the fake peer seals it with `aead`: header, payload (or its
// ciphertext) and tag.
std::vector<uint8_t> sealedFrame(Aead& aead, const FrameHeader& h, const std::vector<uint8_t>& payload,
                                 bool encrypt) {
  std::vector<uint8_t> out = encoded(h);
  std::vector<uint8_t> body(payload.size());
  uint8_t tag[kAeadTagBytes];
  aead.seal(out.data(), out.size(), payload.data(), payload.size(), encrypt ? body.data() : nullptr,
            tag);
  out.insert(out.end(), encrypt ? body.begin() : payload.begin(), encrypt ? body.end() : payload.end());
  out.insert(out.end(), tag, tag + kAeadTagBytes);
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), seed);
  return v;
}

TEST(Sealing, FramesOfEverySizeArriveExactlyBothWays) {
  if (!haveCrypto()) return;
  for (bool encrypt : {false, true}) {
    auto [a, b] = socketPair();
    RecordingSink sa, sb;
    Connection ca(std::move(a), 1, sa, 1u << 20, 65536, "a");
    Connection cb(std::move(b), 0, sb, 1u << 20, 65536, "b");
    ca.enableSealing(encrypt, keyOf(1), keyOf(2));
    cb.enableSealing(encrypt, keyOf(2), keyOf(1));
    ca.start();
    cb.start();
    std::vector<std::vector<uint8_t>> sent;
    for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{65537}, size_t{300007}}) {
      sent.push_back(pattern(n, static_cast<uint8_t>(n)));
    }
    for (auto& v : sent) {
      SendFrame f;
      FrameHeader h = dataHeader(static_cast<uint32_t>(v.size()));
      h.src = 0;
      encodeFrame(h, f.header);
      f.payload = v.data();
      f.length = v.size();
      ca.post(f);
    }
    ASSERT_TRUE(sb.waitFrames(sent.size())) << "encrypt=" << encrypt;
    for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(sb.done[i], sent[i]) << i;
    // And back.
    auto back = pattern(77777, 9);
    SendFrame f;
    encodeFrame(dataHeader(static_cast<uint32_t>(back.size())), f.header);
    f.payload = back.data();
    f.length = back.size();
    cb.post(f);
    ASSERT_TRUE(sa.waitFrames(1));
    EXPECT_EQ(sa.done[0], back);
    ca.close();
    cb.close();
    EXPECT_EQ(sb.error.find("authentication"), std::string::npos) << sb.error;
    EXPECT_EQ(sa.error.find("authentication"), std::string::npos) << sa.error;
  }
}

TEST(Sealing, EncryptedPayloadsDoNotAppearOnTheWire) {
  if (!haveCrypto()) return;
  for (bool encrypt : {false, true}) {
    Rig rig(0, Digest{}, [&](Connection& c) { c.enableSealing(encrypt, keyOf(3), keyOf(4)); });
    auto payload = pattern(4096, 1);
    SendFrame f;
    encodeFrame(dataHeader(4096), f.header);
    f.payload = payload.data();
    f.length = payload.size();
    rig.conn->post(f);
    std::vector<uint8_t> wire(kFrameHeaderBytes + payload.size() + kAeadTagBytes);
    ASSERT_TRUE(rig.fake.recvAll(wire.data(), wire.size(), Deadline::after(5s)));
    const bool plain = std::equal(payload.begin(), payload.end(), wire.begin() + kFrameHeaderBytes);
    EXPECT_EQ(plain, !encrypt);
    // The peer, holding the key, opens it.
    Aead peer(keyOf(3));
    std::vector<uint8_t> body(wire.begin() + kFrameHeaderBytes, wire.end() - kAeadTagBytes);
    ASSERT_TRUE(peer.open(wire.data(), kFrameHeaderBytes, body.data(), body.size(), encrypt,
                          wire.data() + wire.size() - kAeadTagBytes));
    EXPECT_EQ(body, payload);
  }
}

enum class Attack { kFlipPayload, kFlipHeader, kReplay, kNoKey, kUnsealed };

TEST(Sealing, AlteredReplayedOrInjectedFramesEndTheLinkBeforeDelivery) {
  if (!haveCrypto()) return;
  for (bool encrypt : {false, true}) {
    for (Attack attack : {Attack::kFlipPayload, Attack::kFlipHeader, Attack::kReplay, Attack::kNoKey,
                          Attack::kUnsealed}) {
      // The connection opens the fake peer's frames with key 5.
      Rig rig(0, Digest{}, [&](Connection& c) { c.enableSealing(encrypt, keyOf(6), keyOf(5)); });
      Aead peer(attack == Attack::kNoKey ? keyOf(7) : keyOf(5));
      auto payload = pattern(1000, 3);
      auto first = sealedFrame(peer, dataHeader(1000), payload, encrypt);
      size_t expectFrames = 0;
      std::vector<uint8_t> bytes;
      switch (attack) {
        case Attack::kFlipPayload:
          bytes = first;
          bytes[kFrameHeaderBytes + 10] ^= 1;
          break;
        case Attack::kFlipHeader:
          bytes = first;
          bytes[48] ^= 1;  // the slot: still a well-formed header
          break;
        case Attack::kReplay:
          bytes = first;  // delivered once...
          bytes.insert(bytes.end(), first.begin(), first.end());  // ...then again
          expectFrames = 1;
          break;
        case Attack::kNoKey:
          bytes = first;
          break;
        case Attack::kUnsealed:
          bytes = encoded(dataHeader(1000));
          bytes.insert(bytes.end(), payload.begin(), payload.end());
          bytes.resize(bytes.size() + kAeadTagBytes, 0);
          break;
      }
      rig.send(bytes);
      std::string err = rig.sink.waitEnd();
      EXPECT_NE(err.find("failed authentication"), std::string::npos)
          << "attack " << static_cast<int>(attack) << " encrypt " << encrypt << ": " << err;
      EXPECT_NE(err.find("connection to rank 1"), std::string::npos) << err;
      std::lock_guard<std::mutex> lock(rig.sink.mu);
      EXPECT_EQ(rig.sink.done.size(), expectFrames) << "a frame that fails is never delivered";
      // Nor does it reach a posted buffer: a frame below 64 KiB is checked
      // before the sink is asked where it goes.
      EXPECT_EQ(rig.sink.dests, static_cast<int>(expectFrames)) << "attack " << static_cast<int>(attack);
      EXPECT_EQ(rig.sink.aborted, 0);
      if (expectFrames == 1) EXPECT_EQ(rig.sink.done[0], payload);
    }
  }
}

TEST(Sealing, AlteredFramesAroundThe64KiBLimit) {
  if (!haveCrypto()) return;
  // Below 64 KiB an altered frame is refused before the sink is asked where
  // it goes; from 64 KiB it is opened as it lands in its destination and
  // the tag checked at the end: aborted there, never done.
  for (bool encrypt : {false, true}) {
    for (size_t n : {size_t{65535}, size_t{65536}, size_t{200003}}) {
      Rig rig(0, Digest{}, [&](Connection& c) { c.enableSealing(encrypt, keyOf(6), keyOf(5)); });
      Aead peer(keyOf(5));
      auto bytes = sealedFrame(peer, dataHeader(static_cast<uint32_t>(n)), pattern(n, 1), encrypt);
      bytes[kFrameHeaderBytes + n / 2] ^= 0x40;
      rig.send(bytes);
      std::string err = rig.sink.waitEnd();
      EXPECT_NE(err.find("failed authentication"), std::string::npos) << err;
      std::lock_guard<std::mutex> lock(rig.sink.mu);
      const int landed = n >= 65536 ? 1 : 0;
      EXPECT_EQ(rig.sink.dests, landed) << n;
      EXPECT_EQ(rig.sink.aborted, landed) << n;
      EXPECT_TRUE(rig.sink.done.empty()) << n;
    }
  }
}

TEST(Sealing, ControlFramesAreSealedToo) {
  if (!haveCrypto()) return;
  // An ABORT that an on-path attacker forges without the key must not end
  // the group with the attacker's text: the link fails as forged instead.
  Rig rig(0, Digest{}, [&](Connection& c) { c.enableSealing(true, keyOf(6), keyOf(5)); });
  FrameHeader h;
  h.type = FrameType::kAbort;
  h.group = 77;
  h.src = 1;
  const std::string text = "forged: please give up";
  h.length = static_cast<uint32_t>(text.size());
  auto bytes = encoded(h);
  bytes.insert(bytes.end(), text.begin(), text.end());
  bytes.resize(bytes.size() + kAeadTagBytes, 0);
  rig.send(bytes);
  std::string err = rig.sink.waitEnd();
  EXPECT_NE(err.find("failed authentication"), std::string::npos) << err;
  EXPECT_EQ(err.find("please give up"), std::string::npos) << err;
}

}  // namespace
}  // namespace mccl
