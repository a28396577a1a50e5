#include "transport/socket.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "util/check.h"
#include "util/logging.h"

namespace mccl {

namespace {

#if defined(MSG_NOSIGNAL)
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;  // macOS: SO_NOSIGPIPE is set per socket
#endif

void noSigpipe(int fd) {
#if defined(SO_NOSIGPIPE)
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#else
  (void)fd;
#endif
}

// Waits until fd is ready for `events` or the deadline passes.
bool waitReady(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.pollTimeoutMs());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throwError(ErrorKind::kSystem, "poll failed: ", errnoString(errno));
  }
}

ErrorKind kindFor(int err) {
  return (err == ECONNRESET || err == EPIPE || err == ECONNABORTED || err == ETIMEDOUT ||
          err == EHOSTUNREACH || err == ENETUNREACH)
             ? ErrorKind::kRemote
             : ErrorKind::kSystem;
}

std::atomic<uint64_t> gSent{0};
std::atomic<uint64_t> gReceived{0};

void countSent(ssize_t n) {
  if (n > 0) gSent.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
}
void countReceived(ssize_t n) {
  if (n > 0) gReceived.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
}

}  // namespace

WireBytes wireBytes() {
  return {gSent.load(std::memory_order_relaxed), gReceived.load(std::memory_order_relaxed)};
}

int Socket::sendFlags() { return kSendFlags; }

void Socket::setNoSigpipe() { noSigpipe(fd_); }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    deadPeerS_ = o.deadPeerS_;
    o.fd_ = -1;
  }
  return *this;
}

bool Socket::tryListen(const SockAddr& addr, int backlog, Socket* out) {
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throwError(ErrorKind::kSystem, "socket() failed: ", errnoString(errno));
  Socket s(fd);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, addr.sa(), addr.len) != 0) return false;
  if (::listen(fd, backlog) != 0) return false;
  *out = std::move(s);
  return true;
}

Socket Socket::connect(const SockAddr& addr, Deadline deadline, const std::string& what, int* errOut) {
  if (errOut != nullptr) *errOut = 0;
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throwError(ErrorKind::kSystem, what, ": socket() failed: ", errnoString(errno));
  Socket s(fd);
  noSigpipe(fd);
  s.setNonBlocking(true);
  int rc = ::connect(fd, addr.sa(), addr.len);
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    if (errOut != nullptr) *errOut = err;
    throwError(kindFor(err) == ErrorKind::kRemote || err == ECONNREFUSED ? ErrorKind::kRemote
                                                                         : ErrorKind::kSystem,
               what, ": connect to ", addr.toString(), " failed: ", errnoString(err));
  }
  if (rc != 0) {
    if (!waitReady(fd, POLLOUT, deadline)) {
      throwError(ErrorKind::kTimeout, what, ": connect to ", addr.toString(), " timed out");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      if (errOut != nullptr) *errOut = err;
      throwError(ErrorKind::kRemote, what, ": connect to ", addr.toString(), " failed: ",
                 errnoString(err));
    }
  }
  s.setNonBlocking(false);
  return s;
}

SockAddr Socket::localAddr() const {
  SockAddr a;
  a.len = sizeof(a.storage);
  ::getsockname(fd_, a.sa(), &a.len);
  return a;
}

SockAddr Socket::peerAddr() const {
  SockAddr a;
  a.len = sizeof(a.storage);
  if (::getpeername(fd_, a.sa(), &a.len) != 0) a.len = 0;
  return a;
}

void Socket::setNoDelay() {
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void Socket::setNonBlocking(bool on) {
  int flags = ::fcntl(fd_, F_GETFL, 0);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  ::fcntl(fd_, F_SETFL, flags);
}

void Socket::checkCongestion(const std::string& name) {
  bool wellFormed = !name.empty() && name.size() < 16;  // TCP_CA_NAME_MAX
  for (char ch : name) {
    wellFormed = wellFormed && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_');
  }
  MCCL_USAGE_CHECK(wellFormed, "MCCL_TCP_CONGESTION=", name,
                   " is not a congestion control name (letters, digits and _, at most 15)");
#if defined(SOCK_CLOEXEC)
  constexpr int kType = SOCK_STREAM | SOCK_CLOEXEC;
#else
  constexpr int kType = SOCK_STREAM;
#endif
  Socket probe(::socket(AF_INET, kType, 0));
  if (!probe.valid()) probe = Socket(::socket(AF_INET6, kType, 0));
  if (!probe.valid()) throwError(ErrorKind::kSystem, "socket() for MCCL_TCP_CONGESTION: ", errnoString(errno));
  probe.setCongestion(name);
}

void Socket::setCongestion(const std::string& name) {
#if defined(__linux__)
  if (::setsockopt(fd_, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0) {
    return;
  }
  const int err = errno;
  std::string allowed, available;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), allowed);
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_available_congestion_control"), available);
  throwError(ErrorKind::kUsage, "MCCL_TCP_CONGESTION=", name, ": ", errnoString(err),
             " (this kernel offers: ", available.empty() ? "?" : available, "; allowed without CAP_NET_ADMIN: ",
             allowed.empty() ? "?" : allowed, "; net.ipv4.tcp_allowed_congestion_control widens that)");
#else
  throwError(ErrorKind::kUsage, "MCCL_TCP_CONGESTION=", name,
             ": choosing TCP congestion control per connection is Linux only; unset it");
#endif
}

std::string Socket::silentPeer(int err) const {
  if (err != ETIMEDOUT || deadPeerS_ <= 0) return "";
  return strCat(" after no answer for MCCL_KEEPALIVE_S=", deadPeerS_,
                " s: the peer's host is down, unplugged or unreachable");
}

void Socket::setDeadPeerTimeout(int seconds) {
  if (seconds <= 0) return;
  deadPeerS_ = seconds;
  // Probes start halfway through and come every sixth of the time (at least
  // a second apart), enough of them to fill the rest.
  const int idle = (seconds + 1) / 2;
  const int interval = std::max(1, seconds / 6);
  const int count = std::max(1, (seconds - idle + interval - 1) / interval);
  static RateLimiter refusals(1, std::chrono::hours(1));
  auto set = [&](int level, int opt, int value, const char* name) {
    if (::setsockopt(fd_, level, opt, &value, sizeof(value)) == 0) return;
    uint64_t dropped = 0;
    if (refusals.allow(&dropped)) {
      MCCL_LOG(kWarn, "MCCL_KEEPALIVE_S=", seconds, ": setting ", name, " failed: ", errnoString(errno),
               "; a peer that stops answering may be noticed only at the op's timeout");
    }
  };
  set(SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE");
#if defined(TCP_KEEPIDLE)
  set(IPPROTO_TCP, TCP_KEEPIDLE, idle, "TCP_KEEPIDLE");
#elif defined(TCP_KEEPALIVE)
  set(IPPROTO_TCP, TCP_KEEPALIVE, idle, "TCP_KEEPALIVE");  // macOS: the idle time
#endif
#if defined(TCP_KEEPINTVL)
  set(IPPROTO_TCP, TCP_KEEPINTVL, interval, "TCP_KEEPINTVL");
#endif
#if defined(TCP_KEEPCNT)
  set(IPPROTO_TCP, TCP_KEEPCNT, count, "TCP_KEEPCNT");
#endif
#if defined(TCP_USER_TIMEOUT)
  // Linux: unacknowledged data (and, with keepalive, unanswered probes)
  // fails the connection after this long.
  set(IPPROTO_TCP, TCP_USER_TIMEOUT, seconds * 1000, "TCP_USER_TIMEOUT");
#elif defined(TCP_RXT_CONNDROPTIME)
  set(IPPROTO_TCP, TCP_RXT_CONNDROPTIME, seconds, "TCP_RXT_CONNDROPTIME");  // macOS
#endif
}

void Socket::setBufferSizes(int bytes) {
  if (bytes <= 0) return;
  static RateLimiter clampWarnings(1, std::chrono::hours(1));
  for (int opt : {SO_SNDBUF, SO_RCVBUF}) {
    ::setsockopt(fd_, SOL_SOCKET, opt, &bytes, sizeof(bytes));
    int got = 0;
    socklen_t len = sizeof(got);
    ::getsockopt(fd_, SOL_SOCKET, opt, &got, &len);
#if defined(__linux__)
    got /= 2;  // Linux reports double the usable size (bookkeeping overhead)
    const char* sysctl = opt == SO_SNDBUF ? "net.core.wmem_max" : "net.core.rmem_max";
#else
    const char* sysctl = "kern.ipc.maxsockbuf";
#endif
    uint64_t dropped = 0;
    if (got < bytes && clampWarnings.allow(&dropped)) {
      MCCL_LOG(kWarn, "MCCL_SOCKET_BUFFER=", bytes, " but the kernel granted ", got,
               " bytes for ", opt == SO_SNDBUF ? "SO_SNDBUF" : "SO_RCVBUF", "; raise ", sysctl,
               " (e.g. sysctl -w ", sysctl, "=", bytes, ")");
    }
  }
}

void Socket::sendAll(const void* data, size_t len, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    if (!deadline.isNever() && !waitReady(fd_, POLLOUT, deadline)) {
      throwError(ErrorKind::kTimeout, "send timed out");
    }
    ssize_t n = ::send(fd_, p, len, kSendFlags);
    countSent(n);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      int err = errno;
      throwError(kindFor(err), "send failed: ", errnoString(err), silentPeer(err));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

bool Socket::recvAll(void* data, size_t len, Deadline deadline) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < len) {
    if (!deadline.isNever() && !waitReady(fd_, POLLIN, deadline)) {
      throwError(ErrorKind::kTimeout, "receive timed out after ", got, " of ", len, " bytes");
    }
    ssize_t n = ::recv(fd_, p + got, len - got, 0);
    countReceived(n);
    if (n == 0) {
      if (got == 0) return false;
      throwError(ErrorKind::kRemote, "connection closed after ", got, " of ", len, " bytes");
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      int err = errno;
      throwError(kindFor(err), "receive failed: ", errnoString(err), silentPeer(err));
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

void Socket::sendIov(struct iovec* iov, int iovcnt) {
  while (iovcnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iovcnt;
    ssize_t n = ::sendmsg(fd_, &msg, kSendFlags);
    countSent(n);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      int err = errno;
      throwError(kindFor(err), "send failed: ", errnoString(err), silentPeer(err));
    }
    size_t left = static_cast<size_t>(n);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iovcnt;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
}

size_t Socket::sendIovNow(const struct iovec* iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = iovcnt;
  for (;;) {
    ssize_t n = ::sendmsg(fd_, &msg, kSendFlags | MSG_DONTWAIT);
    countSent(n);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    int err = errno;
    throwError(kindFor(err), "send failed: ", errnoString(err), silentPeer(err));
  }
}

size_t Socket::recvSome(void* data, size_t len) {
  for (;;) {
    ssize_t n = ::recv(fd_, data, len, 0);
    countReceived(n);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    int err = errno;
    throwError(kindFor(err), "receive failed: ", errnoString(err), silentPeer(err));
  }
}

void Socket::shutdownBoth() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace mccl
