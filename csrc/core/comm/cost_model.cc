#include "comm/cost_model.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/check.h"
#include "util/params.h"

namespace mccl {

std::string CostModel::defaultPath() {
  const char* home = std::getenv("HOME");
  return strCat(home != nullptr ? home : ".", "/.cache/mccl/tune.conf");
}

std::string CostModel::tunePath() {
  std::string path = params::tuneFile();
  return path.empty() ? defaultPath() : path;
}

CostModel CostModel::parse(const std::string& text, const std::string& source) {
  CostModel m;
  m.source = source;
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    size_t eq = line.find('=');
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    MCCL_USAGE_CHECK(eq != std::string::npos, source, ":", lineNo, ": expected key=value");
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    auto trim = [](std::string s) {
      size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    key = trim(key);
    value = trim(value);
    if (key != "alpha_us" && key != "overhead_us" && key != "beta_ns_per_byte" &&
        key != "gamma_ns_per_byte" && key != "shared_host" && key != "local_read_bytes") {
      continue;  // other keys (how and when it was measured) are informational
    }
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    MCCL_USAGE_CHECK(end != value.c_str() && *end == '\0' && v >= 0, source, ":", lineNo,
                     ": '", value, "' is not a non-negative number");
    if (key == "shared_host") m.sharedHost = v != 0;
    else if (key == "local_read_bytes") m.localReadBytes = static_cast<size_t>(v);
    else if (key == "alpha_us") m.alphaUs = v;
    else if (key == "overhead_us") m.overheadUs = v;
    else if (key == "beta_ns_per_byte") m.betaNsPerByte = v;
    else m.gammaNsPerByte = v;
  }
  return m;
}

namespace {

// The shortest text that parses back to exactly `v`: every rank must derive
// the same choices (Bruck's radix, recursive multiplying's plan) from the
// same bits, since ranks compute them apart.
std::string exact(double v) {
  char text[64];
  const auto r = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, r.ptr);
}

}  // namespace

std::string CostModel::serialize() const {
  return strCat("alpha_us=", exact(alphaUs), "\noverhead_us=", exact(overheadUs), "\nbeta_ns_per_byte=",
                exact(betaNsPerByte), "\ngamma_ns_per_byte=", exact(gammaNsPerByte), "\n",
                sharedHost ? "shared_host=1\n" : "",
                localReadBytes > 0 ? strCat("local_read_bytes=", localReadBytes, "\n") : "");
}

CostModel CostModel::load() {
  const bool explicitPath = !params::tuneFile().empty();
  const std::string path = tunePath();
  CostModel m;
  std::ifstream f(path);
  if (f) {
    std::stringstream ss;
    ss << f.rdbuf();
    m = parse(ss.str(), path);
  } else {
    MCCL_USAGE_CHECK(!explicitPath, "MCCL_TUNE_FILE=", path, " cannot be read");
  }
  bool overridden = false;
  auto apply = [&](double v, double* field) {
    if (v >= 0) {
      *field = v;
      overridden = true;
    }
  };
  apply(params::alphaUs(), &m.alphaUs);
  apply(params::overheadUs(), &m.overheadUs);
  apply(params::betaNsPerByte(), &m.betaNsPerByte);
  apply(params::gammaNsPerByte(), &m.gammaNsPerByte);
  if (overridden) m.source += " with MCCL_* overrides";
  return m;
}

}  // namespace mccl
