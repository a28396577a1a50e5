// Typed errors for the MCCL core.
//
// Every failure the core reports is an mccl::Error with a kind, in the manner
// of NCCL's result codes: callers (the torch adapter, tests) map the kind to
// their own exception types without parsing messages.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mccl {

enum class ErrorKind {
  kUsage,     // the caller passed something invalid, or ranks disagree
  kRemote,    // a peer died, closed, or reported a failure
  kTimeout,   // an operation did not finish before its deadline
  kSystem,    // a system call failed (socket, memory)
  kAborted,   // the communicator was aborted or shut down
  kInternal,  // a broken invariant inside MCCL (a bug)
};

const char* errorKindName(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Concatenates anything that can be streamed: strCat("rank ", 3, ": ", msg).
template <typename... Args>
std::string strCat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void throwError(ErrorKind kind, Args&&... args) {
  throw Error(kind, strCat(std::forward<Args>(args)...));
}

// errno as text ("Connection refused (errno 111)").
std::string errnoString(int err);

}  // namespace mccl
