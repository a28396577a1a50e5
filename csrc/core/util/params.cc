#include "util/params.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "util/check.h"

namespace mccl {

namespace {
// A bound or value as the setting accepts it: a Size's "4096" as "4K".
std::string bound(double v, bool size) {
  const bool integral = v >= -9223372036854775808.0 && v < 9223372036854775808.0 &&
                        v == static_cast<double>(static_cast<int64_t>(v));
  if (size && v >= 1024 && integral) {
    auto i = static_cast<int64_t>(v);
    const char* suffix[] = {"K", "M", "G", "T"};
    int k = -1;
    while (i % 1024 == 0 && k < 3) {
      i /= 1024;
      ++k;
    }
    if (k >= 0) return strCat(i, suffix[k]);
  }
  if (integral) {
    return strCat(static_cast<int64_t>(v));
  }
  return strCat(v);
}

std::string rangeText(const char* type, double lo, double hi) {
  const std::string t(type);
  return t == "String" ? std::string() : strCat(bound(lo, t == "Size"), " to ", bound(hi, t == "Size"));
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}
}  // namespace

const std::vector<ParamInfo>& allParams() {
  using params::kGiB;
  using params::kTiB;
  static const std::vector<ParamInfo> list = {
#define MCCL_PARAM(id, env, type, def, lo, hi, doc) \
  {env, #type, unquote(#def), doc, rangeText(#type, lo, hi)},
#include "util/params.def"
#undef MCCL_PARAM
  };
  return list;
}

namespace {
// The decimal integer at the start of `text` (an optional '-', then digits);
// `*end` is where it stops. Throws when there is none or it overflows.
int64_t leadingInt(const std::string& text, const char* what, size_t* end) {
  MCCL_USAGE_CHECK(!text.empty(), what, ": empty value");
  const bool negative = text[0] == '-';
  size_t i = negative ? 1 : 0;
  const size_t first = i;
  // Accumulated as a negative number, whose range reaches INT64_MIN.
  int64_t value = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const int digit = text[i] - '0';
    MCCL_USAGE_CHECK(value >= (INT64_MIN + digit) / 10, what, "=", text, " does not fit in 64 bits");
    value = value * 10 - digit;
  }
  if (i == first) throwError(ErrorKind::kUsage, what, "=", text, " is not a number");
  if (i < text.size() && (text[i] == 'x' || text[i] == 'X')) {
    throwError(ErrorKind::kUsage, what, "=", text, " is not a decimal number");
  }
  if (!negative) {
    MCCL_USAGE_CHECK(value != INT64_MIN, what, "=", text, " does not fit in 64 bits");
    value = -value;
  }
  *end = i;
  return value;
}
}  // namespace

int64_t parseInt(const std::string& text, const char* what) {
  size_t end = 0;
  const int64_t value = leadingInt(text, what, &end);
  MCCL_USAGE_CHECK(end == text.size(), what, "=", text,
                   " is not a whole number (a plain decimal integer, without a suffix)");
  return value;
}

int64_t parseSize(const std::string& text, const char* what) {
  size_t end = 0;
  const int64_t value = leadingInt(text, what, &end);
  const std::string suffix = text.substr(end);
  int64_t scale = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = int64_t{1} << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") scale = int64_t{1} << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") scale = int64_t{1} << 30;
  else if (suffix == "T" || suffix == "t" || suffix == "TiB") scale = int64_t{1} << 40;
  else MCCL_USAGE_CHECK(suffix.empty(), what, "=", text,
                        " has an unknown suffix (use K, M, G or T)");
  MCCL_USAGE_CHECK(value >= INT64_MIN / scale && value <= INT64_MAX / scale, what, "=", text,
                   " does not fit in 64 bits");
  return value * scale;
}

namespace params {

Int intFrom(const char* env, const std::string& text, Int def, double lo, double hi, bool size) {
  if (text.empty()) return def;
  Int x = size ? parseSize(text, env) : parseInt(text, env);
  checkRange(env, static_cast<double>(x), lo, hi, size);
  return x;
}

namespace {

Int readInt(const char* env, Int def, double lo, double hi, bool size) {
  const char* v = std::getenv(env);
  return intFrom(env, v == nullptr ? std::string() : std::string(v), def, lo, hi, size);
}

Float readFloat(const char* env, Float def, double lo, double hi) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  // strtod also takes spaces, '+', hexadecimal, "inf" and "nan": none is a setting's number.
  const std::string text(v);
  const bool plain = text.find_first_not_of("0123456789.-eE") == std::string::npos;
  MCCL_USAGE_CHECK(plain && end != v && *end == '\0', env, "=", v, " is not a number");
  checkRange(env, d, lo, hi);
  return d;
}

String readString(const char* env, const char* def) {
  const char* v = std::getenv(env);
  return (v == nullptr || *v == '\0') ? String(def) : String(v);
}

template <typename T>
struct Reader;
template <>
struct Reader<Int> {  // Int and Size (one C++ type): spec says which
  static Int read(const char* env, Int def, double lo, double hi, bool size) {
    return readInt(env, def, lo, hi, size);
  }
};
template <>
struct Reader<Float> {
  static Float read(const char* env, Float def, double lo, double hi, bool) {
    return readFloat(env, def, lo, hi);
  }
};
template <>
struct Reader<String> {
  static String read(const char* env, const char* def, double, double, bool) {
    return readString(env, def);
  }
};

}  // namespace

void checkRange(const char* env, double value, double lo, double hi, bool size) {
  MCCL_USAGE_CHECK(value >= lo && value <= hi, env, "=", bound(value, size), " is out of range: ",
                   "it must be in [", bound(lo, size), ", ", bound(hi, size), "]");
}

#define MCCL_PARAM(id, env, type, def, lo, hi, doc) \
  type id() { return Reader<type>::read(env, def, lo, hi, spec::id.size); }
#include "util/params.def"
#undef MCCL_PARAM

}  // namespace params
}  // namespace mccl
