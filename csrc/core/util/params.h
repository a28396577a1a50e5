// MCCL_* settings: declared once in params.def with type, default and doc
// (in the manner of NCCL_PARAM). Values come from the environment and are
// read when asked for, so a communicator snapshots them at creation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mccl {

struct ParamInfo {
  std::string env;           // "MCCL_SOCKET_IFNAME"
  std::string type;          // "Size", "Int", "Float" or "String"
  std::string defaultValue;  // as text, without quotes
  std::string doc;
  std::string range;  // "4K to 1G" for numbers, empty for strings
};

// Every declared setting, in declaration order.
const std::vector<ParamInfo>& allParams();

namespace params {
using Int = int64_t;
using Size = int64_t;  // an Int whose text may carry a K, M, G or T suffix
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
  bool size;  // declared Size: K, M, G and T suffixes accepted
};
namespace spec {
#define MCCL_PARAM(id, env, ty, def, lo, hi, doc) \
  inline constexpr Spec<DefaultOf<ty>::type> id{env, def, lo, hi, std::string_view(#ty) == "Size"};
#include "util/params.def"
#undef MCCL_PARAM
}  // namespace spec

// Throws a usage error when `value` is outside the declared range of `env`
// (written with K/M/G/T where `size`: a Size setting's).
void checkRange(const char* env, double value, double lo, double hi, bool size = false);
// A Size or Int setting's value from its text as the environment would hold
// it: the default when empty, else parsed (a Size "4M" or "4194304", an Int
// "4194304" only) and range-checked.
Int intFrom(const char* env, const std::string& text, Int def, double lo, double hi, bool size);
template <typename T>
Int intFrom(const Spec<T>& s, const std::string& text) {
  return intFrom(s.env, text, s.def, s.lo, s.hi, s.size);
}
template <typename T, typename V>
void checkRange(const Spec<T>& s, V value) {
  checkRange(s.env, static_cast<double>(value), s.lo, s.hi, s.size);
}
}  // namespace params

// Parses a decimal integer, optionally signed ("-1", "4194304"), with
// nothing before or after it; throws a usage error naming `what` when the
// text is anything else (empty, hexadecimal, spaces, a suffix) or does not
// fit in 64 bits.
int64_t parseInt(const std::string& text, const char* what);
// Parses "64K", "4M", "1G", "1T" (also k/m/g/t and KiB/MiB/GiB/TiB) or a decimal
// integer as parseInt does; throws a usage error naming `what` otherwise,
// or when the product does not fit in 64 bits.
int64_t parseSize(const std::string& text, const char* what);

}  // namespace mccl
