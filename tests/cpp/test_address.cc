#include <gtest/gtest.h>

#include "transport/address.h"
#include "util/error.h"

namespace mccl {
namespace {

TEST(Ifname, PrefixesExclusionAndExact) {
  EXPECT_TRUE(ifnameMatches("eth", "eth0"));
  EXPECT_TRUE(ifnameMatches("ib,eth", "eth1"));
  EXPECT_FALSE(ifnameMatches("eth", "en0"));
  EXPECT_FALSE(ifnameMatches("^docker,lo", "docker0"));
  EXPECT_FALSE(ifnameMatches("^docker,lo", "lo"));
  EXPECT_TRUE(ifnameMatches("^docker,lo", "eth0"));
  EXPECT_TRUE(ifnameMatches("=eth0", "eth0"));
  EXPECT_FALSE(ifnameMatches("=eth0", "eth01"));
  EXPECT_FALSE(ifnameMatches("^=eth0", "eth0"));
  EXPECT_TRUE(ifnameMatches("^=eth0", "eth01"));
  EXPECT_TRUE(ifnameMatches("eth0:5000", "eth0"));  // NCCL's optional port part
}

TEST(SockAddr, ParseAndFormat) {
  SockAddr a = SockAddr::parse("127.0.0.1:4242");
  EXPECT_EQ(a.port(), 4242);
  EXPECT_EQ(a.toString(), "127.0.0.1:4242");
  SockAddr b = SockAddr::parse("[::1]:80");
  EXPECT_EQ(b.toString(), "[::1]:80");
  EXPECT_TRUE(a.sameHost(SockAddr::parse("127.0.0.1:1")));
  EXPECT_THROW(SockAddr::parse("127.0.0.1"), Error);
  EXPECT_THROW(SockAddr::parse("127.0.0.1:99999"), Error);
}

TEST(SelectInterface, LoopbackByRouteAndByName) {
  Interface byRoute = selectInterface("", "127.0.0.1");
  EXPECT_TRUE(byRoute.loopback);
  EXPECT_EQ(byRoute.addr.host(), "127.0.0.1");
  Interface byName = selectInterface("=lo", "");
  EXPECT_EQ(byName.name, "lo");
  try {
    selectInterface("=no_such_if", "");
    FAIL() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("no_such_if"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("lo="), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mccl
