// util/error.h: strCat writes what a default std::ostream writes, on its
// direct path (text and integers) and on its stream path (anything else).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "util/error.h"

namespace mccl {
namespace {

template <typename... Args>
std::string streamed(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

enum Plain { kTwo = 2 };

TEST(StrCat, TextAndIntegersAsAStreamWritesThem) {
  const std::string s = "group 'default_pg'";
  const std::string_view sv = "view";
  char buf[] = "mutable";
  const char* nothing = nullptr;
  EXPECT_EQ(strCat("rank ", 3, "/", 24u, ": ", s, " ", sv, " ", buf),
            streamed("rank ", 3, "/", 24u, ": ", s, " ", sv, " ", buf));
  EXPECT_EQ(strCat(INT64_MIN, " ", INT64_MAX, " ", UINT64_MAX, " ", static_cast<short>(-7), " ", size_t{0}),
            streamed(INT64_MIN, " ", INT64_MAX, " ", UINT64_MAX, " ", static_cast<short>(-7), " ", size_t{0}));
  // Characters of every char type print as characters; bool as 1 or 0.
  EXPECT_EQ(strCat('x', static_cast<uint8_t>('A'), static_cast<int8_t>('b'), true, false),
            streamed('x', static_cast<uint8_t>('A'), static_cast<int8_t>('b'), true, false));
  EXPECT_EQ(strCat('x', static_cast<uint8_t>('A'), static_cast<int8_t>('b'), true, false), "xAb10");
  EXPECT_EQ(strCat("[", nothing, "]"), "[]");
  EXPECT_EQ(strCat(), "");
}

TEST(StrCat, OtherTypesGoThroughAStream) {
  EXPECT_EQ(strCat("factor ", 0.1, " of ", 3, " ", kTwo, " ", 1e300), streamed("factor ", 0.1, " of ", 3, " ", kTwo, " ", 1e300));
  EXPECT_EQ(strCat(2.5f, "x"), "2.5x");
}

}  // namespace
}  // namespace mccl
