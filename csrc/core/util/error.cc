#include "util/error.h"

#include <cstring>

namespace mccl {

const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return "usage error";
    case ErrorKind::kRemote: return "remote error";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kSystem: return "system error";
    case ErrorKind::kAborted: return "aborted";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

std::string errnoString(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return strCat(text, " (errno ", err, ")");
}

}  // namespace mccl
