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
};

// Every declared setting, in declaration order.
const std::vector<ParamInfo>& allParams();

namespace params {
using Int = int64_t;
using Float = double;
using String = std::string;
#define MCCL_PARAM(id, env, type, def, doc) type id();
#include "util/params.def"
#undef MCCL_PARAM
}  // namespace params

// Parses "64K", "4M", "1G" or a plain integer; throws a usage error naming
// `what` when the text is not a number.
int64_t parseSize(const std::string& text, const char* what);

}  // namespace mccl
