// Typed errors for the MCCL core.
//
// Every failure the core reports is an mccl::Error with a kind, in the manner
// of NCCL's result codes: callers (the torch adapter, tests) map the kind to
// their own exception types without parsing messages.
#pragma once

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
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

namespace detail {
// Pieces strCat appends itself, exactly as a default std::ostream writes
// them: text, characters (char, signed char and unsigned char print as
// characters), bool as 1 or 0, and other integers in decimal.
template <typename T, typename D = std::remove_cvref_t<T>>
inline constexpr bool kPlainPiece =
    std::is_integral_v<D> || std::is_same_v<D, std::string> || std::is_same_v<D, std::string_view> ||
    std::is_same_v<std::decay_t<T>, const char*> || std::is_same_v<std::decay_t<T>, char*>;

template <typename T>
void appendPiece(std::string& out, const T& v) {
  using D = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<D, bool>) {
    out += v ? '1' : '0';
  } else if constexpr (std::is_same_v<D, char> || std::is_same_v<D, signed char> ||
                       std::is_same_v<D, unsigned char>) {
    out += static_cast<char>(v);
  } else if constexpr (std::is_integral_v<D>) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
  } else if constexpr (std::is_pointer_v<D>) {
    if (v != nullptr) out += v;  // a stream writes nothing for a null pointer
  } else {
    out += v;
  }
}
}  // namespace detail

// Concatenates anything that can be streamed: strCat("rank ", 3, ": ", msg).
// Text and integers are appended directly (this runs on every op's path);
// anything else goes through a std::ostringstream, with the same result.
template <typename... Args>
std::string strCat(Args&&... args) {
  if constexpr ((detail::kPlainPiece<Args> && ...)) {
    std::string out;
    (detail::appendPiece(out, args), ...);
    return out;
  } else {
    std::ostringstream os;
    (os << ... << std::forward<Args>(args));
    return os.str();
  }
}

template <typename... Args>
[[noreturn]] void throwError(ErrorKind kind, Args&&... args) {
  throw Error(kind, strCat(std::forward<Args>(args)...));
}

// errno as text ("Connection refused (errno 111)").
std::string errnoString(int err);

}  // namespace mccl
