#include "transport/listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "util/thread_name.h"
#include "util/check.h"

namespace mccl {
namespace {

constexpr int kMaxPendingHandshakes = 128;
// A handshake younger than this is never evicted for a newcomer: a real peer
// finishes in milliseconds, so under a flood the old ones are the flood's,
// and a burst of real peers (the first alltoall of a large job) waits in the
// kernel's backlog instead of being cut off.
constexpr auto kEvictAfter = std::chrono::seconds(1);
// After accept() fails for want of resources (file descriptors, buffers),
// how long the listen socket rests before the next try.
constexpr auto kAcceptRest = std::chrono::milliseconds(100);

struct Pending {
  Socket sock;
  SockAddr from;
  std::unique_ptr<AcceptorHandshake> hs;
  Deadline deadline;
  Clock::time_point started = Clock::now();
};

}  // namespace

bool parsePortRange(const std::string& range, int* lo, int* hi) {
  const size_t dash = range.find('-');
  if (dash == std::string::npos) return false;
  auto number = [](const std::string& s, int* out) {
    if (s.empty() || s.size() > 5) return false;
    for (char ch : s) {
      if (ch < '0' || ch > '9') return false;  // no signs, spaces or suffixes
    }
    *out = std::stoi(s);
    return true;
  };
  return number(range.substr(0, dash), lo) && number(range.substr(dash + 1), hi) && *lo > 0 &&
         *hi <= 65535 && *lo <= *hi;
}

Listener::Listener(const SockAddr& addr, const std::string& portRange, const Identity& self,
                   std::chrono::milliseconds handshakeTimeout, OnPeer onPeer,
                   std::string logPrefix)
    : self_(self),
      handshakeTimeout_(handshakeTimeout),
      onPeer_(std::move(onPeer)),
      logPrefix_(std::move(logPrefix)) {
  SockAddr bindAddr = addr;
  if (portRange.empty()) {
    bindAddr.setPort(0);
    if (!Socket::tryListen(bindAddr, 512, &sock_)) {
      throwError(ErrorKind::kSystem, logPrefix_, "cannot listen on ", bindAddr.host(), ": ",
                 errnoString(errno));
    }
  } else {
    int lo = 0, hi = 0;
    MCCL_USAGE_CHECK(parsePortRange(portRange, &lo, &hi), "MCCL_PORT_RANGE=", portRange,
                     " is not LOW-HIGH with 1 <= LOW <= HIGH <= 65535");
    bool ok = false;
    int otherErr = 0, otherPort = 0;  // a failure other than "in use"
    for (int p = lo; p <= hi && !ok; ++p) {
      bindAddr.setPort(p);
      ok = Socket::tryListen(bindAddr, 512, &sock_);
      if (!ok && errno != EADDRINUSE && otherErr == 0) {
        otherErr = errno;
        otherPort = p;
      }
    }
    if (!ok && otherErr != 0) {
      throwError(ErrorKind::kSystem, logPrefix_, "cannot listen on ", bindAddr.host(), ":",
                 otherPort, " (MCCL_PORT_RANGE=", portRange, "): ", errnoString(otherErr));
    }
    MCCL_USAGE_CHECK(ok, logPrefix_, "no free port in MCCL_PORT_RANGE=", portRange, " on ",
                     bindAddr.host(), ": every port is in use");
  }
  addr_ = sock_.localAddr();
  sock_.setNonBlocking(true);
  int fds[2];
#if defined(__linux__)
  if (::pipe2(fds, O_CLOEXEC) != 0) throwError(ErrorKind::kSystem, "pipe failed: ", errnoString(errno));
#else
  if (::pipe(fds) != 0) throwError(ErrorKind::kSystem, "pipe failed: ", errnoString(errno));
  ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);  // a fork in between would inherit them: macOS has no pipe2
  ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
#endif
  wakeRead_ = fds[0];
  wakeWrite_ = fds[1];
  thread_ = std::thread([this] {
    nameThisThread("mccl-listen");
    loop();
  });
}

Listener::~Listener() {
  stop();
  if (wakeRead_ >= 0) ::close(wakeRead_);
  if (wakeWrite_ >= 0) ::close(wakeWrite_);
}

void Listener::stop() {
  if (!stop_.exchange(true)) {
    char b = 1;
    ssize_t rc = ::write(wakeWrite_, &b, 1);
    (void)rc;
  }
  if (thread_.joinable()) thread_.join();
  sock_.close();
}

void Listener::loop() {
  std::vector<Pending> pending;
  Deadline acceptRest(Clock::now());  // accept() rests until then (expired: it does not)
  RateLimiter acceptLog{1, std::chrono::seconds(10)};
  auto reject = [&](Pending& p, const std::string& why) {
    ++rejected_;
    uint64_t dropped = 0;
    if (rejectLog_.allow(&dropped)) {
      MCCL_LOG(kWarn, logPrefix_, "rejected a connection from ", p.from.toString(), ": ", why,
               dropped ? strCat(" (", dropped, " similar messages suppressed)") : std::string());
    }
    p.sock.close();
  };
  while (!stop_.load()) {
    std::vector<pollfd> fds;
    fds.push_back({wakeRead_, POLLIN, 0});
    // The listen socket is watched unless accept() rests, or every slot is
    // taken by a handshake too young to evict (until the oldest ages).
    Deadline next = Deadline::never();
    const bool resting = !acceptRest.expired();
    const bool full = static_cast<int>(pending.size()) >= kMaxPendingHandshakes;
    if (resting) next = acceptRest;
    if (full) next = next.earlier(Deadline(pending.front().started + kEvictAfter));
    const bool canAccept = !resting && (!full || Clock::now() - pending.front().started >= kEvictAfter);
    fds.push_back({sock_.fd(), static_cast<short>(canAccept ? POLLIN : 0), 0});
    for (auto& p : pending) {
      size_t outLen = 0;
      p.hs->pendingOutput(&outLen);
      short ev = outLen > 0 ? POLLOUT : POLLIN;
      fds.push_back({p.sock.fd(), ev, 0});
      next = next.earlier(p.deadline);
    }
    int rc = ::poll(fds.data(), fds.size(), next.pollTimeoutMs());
    if (rc < 0 && errno != EINTR) {
      MCCL_LOG(kError, logPrefix_, "listener poll failed: ", errnoString(errno));
      return;
    }
    if (stop_.load()) break;
    // Progress the handshakes in flight.
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      short re = fds[i + 2].revents;
      try {
        if (re & (POLLERR | POLLHUP | POLLNVAL)) {
          if (!(re & POLLIN)) throwError(ErrorKind::kRemote, "closed during the handshake");
        }
        if (re & POLLOUT) {
          size_t len = 0;
          const uint8_t* out = p.hs->pendingOutput(&len);
          ssize_t n = ::send(p.sock.fd(), out, len, Socket::sendFlags());
          if (n < 0 && errno != EAGAIN && errno != EINTR) {
            throwError(ErrorKind::kRemote, "send failed: ", errnoString(errno));
          }
          if (n > 0) p.hs->consumedOutput(static_cast<size_t>(n));
        } else if (re & POLLIN) {
          uint8_t buf[kHelloCBytes];
          ssize_t n = ::recv(p.sock.fd(), buf, sizeof(buf), 0);
          if (n == 0) throwError(ErrorKind::kRemote, "closed during the handshake");
          if (n < 0 && errno != EAGAIN && errno != EINTR) {
            throwError(ErrorKind::kRemote, "receive failed: ", errnoString(errno));
          }
          if (n > 0) p.hs->feed(buf, static_cast<size_t>(n));
        }
        if (p.hs->state() == AcceptorHandshake::State::kFailed) {
          throwError(ErrorKind::kRemote, p.hs->failure());
        }
        if (p.deadline.expired() && p.hs->state() != AcceptorHandshake::State::kDone) {
          throwError(ErrorKind::kTimeout, "no valid handshake within ",
                     handshakeTimeout_.count(), " ms");
        }
      } catch (const Error& e) {
        reject(p, e.what());
      }
      if (p.sock.valid() && p.hs->state() == AcceptorHandshake::State::kDone) {
        p.sock.setNonBlocking(false);
        uint32_t peer = p.hs->peerRank();
        MCCL_LOG(kDebug, logPrefix_, "accepted rank ", peer, " from ", p.from.toString());
        try {
          onPeer_(std::move(p.sock), peer, p.hs->peerListenPort(), p.hs->sessionKey());
        } catch (const std::exception& e) {  // e.g. no thread for the connection: the peer sees it close
          MCCL_LOG(kWarn, logPrefix_, "could not take the connection of rank ", peer, " from ",
                   p.from.toString(), ": ", e.what());
        }
      }
    }
    std::erase_if(pending, [](const Pending& p) { return !p.sock.valid(); });
    // Accept new connections.
    if (fds[1].revents & POLLIN) {
      for (;;) {
        if (static_cast<int>(pending.size()) >= kMaxPendingHandshakes) {
          // Evict the oldest, once it is old enough; else the rest wait in
          // the kernel's backlog for a slot.
          if (Clock::now() - pending.front().started < kEvictAfter) break;
          reject(pending.front(), "too many handshakes in progress; dropped the oldest");
          pending.erase(pending.begin());
        }
        SockAddr from;
        from.len = sizeof(from.storage);
#if defined(__linux__)
        int fd = ::accept4(sock_.fd(), from.sa(), &from.len, SOCK_CLOEXEC);
#else
        int fd = ::accept(sock_.fd(), from.sa(), &from.len);
        if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
#endif
        if (fd < 0) {
          const int err = errno;
          if (err == EINTR || err == ECONNABORTED) continue;
          if (err == EAGAIN || err == EWOULDBLOCK) break;
          // Out of file descriptors or buffers: the socket stays readable,
          // so rest instead of spinning, and say why peers wait.
          uint64_t dropped = 0;
          if (acceptLog.allow(&dropped)) {
            MCCL_LOG(kWarn, logPrefix_, "accept failed: ", errnoString(err),
                     "; connecting peers wait (raise the open-file limit, ulimit -n)");
          }
          acceptRest = Deadline::after(kAcceptRest);
          break;
        }
        Pending p{Socket(fd), from, std::make_unique<AcceptorHandshake>(self_),
                  Deadline::after(handshakeTimeout_)};
        p.sock.setNoSigpipe();  // macOS: accepted sockets do not inherit it
        p.sock.setNonBlocking(true);
        pending.push_back(std::move(p));
      }
    }
  }
}

}  // namespace mccl
