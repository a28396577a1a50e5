#include "util/params.h"

#include <cstdlib>

#include "util/check.h"

namespace mccl {

namespace {
std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}
}  // namespace

const std::vector<ParamInfo>& allParams() {
  static const std::vector<ParamInfo> list = {
#define MCCL_PARAM(id, env, type, def, doc) {env, #type, unquote(#def), doc},
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
namespace {

Int readInt(const char* env, Int def) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') return def;
  return parseSize(v, env);
}

Float readFloat(const char* env, Float def) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  MCCL_USAGE_CHECK(end != v && *end == '\0', env, "=", v, " is not a number");
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
  static Int read(const char* env, Int def) { return readInt(env, def); }
};
template <>
struct Reader<Float> {
  static Float read(const char* env, Float def) { return readFloat(env, def); }
};
template <>
struct Reader<String> {
  static String read(const char* env, const char* def) { return readString(env, def); }
};

}  // namespace

#define MCCL_PARAM(id, env, type, def, doc) \
  type id() { return Reader<type>::read(env, def); }
#include "util/params.def"
#undef MCCL_PARAM

}  // namespace params
}  // namespace mccl
