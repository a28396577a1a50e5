#include "util/params.h"

#include <cmath>
#include <cstdlib>

#include "util/check.h"

namespace mccl {

namespace {
// "4096" -> "4K"; sizes as the settings accept them.
std::string bound(double v) {
  if (v >= 1024 && v == static_cast<double>(static_cast<int64_t>(v))) {
    auto i = static_cast<int64_t>(v);
    const char* suffix[] = {"K", "M", "G", "T"};
    int k = -1;
    while (i % 1024 == 0 && k < 3) {
      i /= 1024;
      ++k;
    }
    if (k >= 0) return strCat(i, suffix[k]);
  }
  if (std::abs(v) < 1e15 && v == static_cast<double>(static_cast<int64_t>(v))) {
    return strCat(static_cast<int64_t>(v));
  }
  return strCat(v);
}

std::string rangeText(const char* type, double lo, double hi) {
  return std::string(type) == "String" ? std::string() : strCat(bound(lo), " to ", bound(hi));
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

int64_t parseSize(const std::string& text, const char* what) {
  MCCL_USAGE_CHECK(!text.empty(), what, ": empty value");
  size_t pos = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &pos, 0);
  } catch (const std::exception&) {
    throwError(ErrorKind::kUsage, what, "=", text, " is not a number");
  }
  std::string suffix = text.substr(pos);
  int64_t scale = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = int64_t{1} << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") scale = int64_t{1} << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") scale = int64_t{1} << 30;
  else MCCL_USAGE_CHECK(suffix.empty(), what, "=", text,
                        " has an unknown suffix (use K, M or G)");
  return static_cast<int64_t>(value) * scale;
}

namespace params {

Int intFrom(const char* env, const std::string& text, Int def, double lo, double hi) {
  if (text.empty()) return def;
  Int x = parseSize(text, env);
  checkRange(env, static_cast<double>(x), lo, hi);
  return x;
}

namespace {

Int readInt(const char* env, Int def, double lo, double hi) {
  const char* v = std::getenv(env);
  return intFrom(env, v == nullptr ? std::string() : std::string(v), def, lo, hi);
}

Float readFloat(const char* env, Float def, double lo, double hi) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  MCCL_USAGE_CHECK(end != v && *end == '\0', env, "=", v, " is not a number");
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
struct Reader<Int> {
  static Int read(const char* env, Int def, double lo, double hi) { return readInt(env, def, lo, hi); }
};
template <>
struct Reader<Float> {
  static Float read(const char* env, Float def, double lo, double hi) {
    return readFloat(env, def, lo, hi);
  }
};
template <>
struct Reader<String> {
  static String read(const char* env, const char* def, double, double) {
    return readString(env, def);
  }
};

}  // namespace

void checkRange(const char* env, double value, double lo, double hi) {
  MCCL_USAGE_CHECK(value >= lo && value <= hi, env, "=", bound(value), " is out of range: ",
                   "it must be in [", bound(lo), ", ", bound(hi), "]");
}

#define MCCL_PARAM(id, env, type, def, lo, hi, doc) \
  type id() { return Reader<type>::read(env, def, lo, hi); }
#include "util/params.def"
#undef MCCL_PARAM

}  // namespace params
}  // namespace mccl
