#include <gtest/gtest.h>

#include <string>

#include "util/sha256.h"

namespace mccl {
namespace {

std::string hex(const Digest& d) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += k[b >> 4];
    s += k[b & 15];
  }
  return s;
}

// FIPS 180-4 examples.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(hex(sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hex(sha256(two.data(), two.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::string m(1000, 'x');
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<char>(i * 7);
  Sha256 s;
  for (size_t i = 0; i < m.size(); i += 37) s.update(m.data() + i, std::min<size_t>(37, m.size() - i));
  EXPECT_EQ(s.finish(), sha256(m.data(), m.size()));
}

// RFC 4231 test cases 1 and 2.
TEST(Sha256, HmacRfc4231) {
  std::string key1(20, '\x0b');
  EXPECT_EQ(hex(hmacSha256(key1.data(), key1.size(), "Hi There", 8)),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  std::string msg2 = "what do ya want for nothing?";
  EXPECT_EQ(hex(hmacSha256("Jefe", 4, msg2.data(), msg2.size())),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Case 6: a key longer than the block size is hashed first.
  std::string key6(131, '\xaa');
  std::string msg6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  EXPECT_EQ(hex(hmacSha256(key6.data(), key6.size(), msg6.data(), msg6.size())),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Sha256, ConstantTimeEqual) {
  uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  EXPECT_TRUE(constantTimeEqual(a, a, 4));
  EXPECT_FALSE(constantTimeEqual(a, b, 4));
}

}  // namespace
}  // namespace mccl
