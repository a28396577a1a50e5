// MCCL_* settings: declared once in params.def with type, default and doc
// (in the manner of NCCL_PARAM). Values come from the environment and are
// read when asked for, so a communicator snapshots them at creation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mccl {

struct ParamInfo {
  std::string env;           // "MCCL_SOCKET_IFNAME"
  std::string type;          // "Int", "Float" or "String"
  std::string defaultValue;  // as text, without quotes
  std::string doc;
  std::string range;  // "4K to 1G" for numbers, empty for strings
};

// Every declared setting, in declaration order.
const std::vector<ParamInfo>& allParams();

namespace params {
using Int = int64_t;
using Float = double;
using String = std::string;
inline constexpr Int kGiB = Int{1} << 30;
inline constexpr Int kTiB = Int{1} << 40;

// Each setting's value: the environment's when set, else its default.
// Throws a usage error naming the variable, the value and what is accepted
// when the text is malformed or the number outside [min, max].
#define MCCL_PARAM(id, env, type, def, lo, hi, doc) type id();
#include "util/params.def"
#undef MCCL_PARAM

// Each setting's declaration, for code that fills a config itself (tests)
// and checks it: spec::chunkBytes.def, .lo, .hi, .env.
template <typename T>
struct DefaultOf {
  using type = T;
};
template <>
struct DefaultOf<String> {
  using type = const char*;
};
template <typename T>
struct Spec {
  const char* env;
  T def;
  double lo, hi;
};
namespace spec {
#define MCCL_PARAM(id, env, ty, def, lo, hi, doc) \
  inline constexpr Spec<DefaultOf<ty>::type> id{env, def, lo, hi};
#include "util/params.def"
#undef MCCL_PARAM
}  // namespace spec

// Throws a usage error when `value` is outside the declared range of `env`.
void checkRange(const char* env, double value, double lo, double hi);
// An Int setting's value from its text as the environment would hold it:
// the default when empty, else parsed ("4M", "4194304") and range-checked.
Int intFrom(const char* env, const std::string& text, Int def, double lo, double hi);
template <typename T>
Int intFrom(const Spec<T>& s, const std::string& text) {
  return intFrom(s.env, text, s.def, s.lo, s.hi);
}
template <typename T, typename V>
void checkRange(const Spec<T>& s, V value) {
  checkRange(s.env, static_cast<double>(value), s.lo, s.hi);
}
}  // namespace params

// Parses "64K", "4M", "1G" or a plain integer; throws a usage error naming
// `what` when the text is not a number.
int64_t parseSize(const std::string& text, const char* what);

}  // namespace mccl
