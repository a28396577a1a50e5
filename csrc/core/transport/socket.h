// A TCP socket owned by one object (RAII), with blocking full-length I/O.
//
// Blocking calls may take a Deadline; without one they block until done or
// until another thread calls shutdownBoth(), which is how owners stop a
// thread that is parked in recv/send.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/address.h"
#include "util/time.h"

namespace mccl {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_), deadPeerS_(o.deadPeerS_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Flags for send()/sendmsg() on a socket of this process: no SIGPIPE
  // where the system has MSG_NOSIGNAL; elsewhere (macOS) the socket must
  // have been made with setNoSigpipe(), as connect() and accepted sockets are.
  static int sendFlags();
  // SO_NOSIGPIPE where it exists (macOS), for sockets made by accept().
  void setNoSigpipe();

  // Binds and listens on `addr` (its port may be 0 for an ephemeral port).
  // Returns false with errno set if the port is taken.
  static bool tryListen(const SockAddr& addr, int backlog, Socket* out);
  // Connects with a deadline. Throws kSystem/kTimeout naming `what`.
  // On failure *errOut (when given) holds the errno that failed it (0 for
  // a timeout), e.g. ECONNREFUSED: nothing listens there.
  static Socket connect(const SockAddr& addr, Deadline deadline, const std::string& what,
                        int* errOut = nullptr);

  SockAddr localAddr() const;
  SockAddr peerAddr() const;

  void setNoDelay();
  void setNonBlocking(bool on);
  // Sets SO_SNDBUF/SO_RCVBUF; logs a warning naming the sysctl to raise when
  // the kernel grants less than asked.
  void setBufferSizes(int bytes);
  // A peer that stops answering (no reset comes: powered off, unplugged)
  // fails the connection after about `seconds` of silence: keepalive probes
  // while idle, a retransmission limit while sending. 0 changes nothing.
  // Options the system lacks are skipped; a refused one is logged once.
  void setDeadPeerTimeout(int seconds);
  // Sets the connection's TCP congestion control (TCP_CONGESTION, Linux).
  // checkCongestion refuses, with a usage error naming MCCL_TCP_CONGESTION,
  // a malformed name, one this kernel does not offer this process, and any
  // name where the option does not exist; setCongestion throws the same.
  static void checkCongestion(const std::string& name);
  void setCongestion(const std::string& name);

  // Sends/receives exactly len bytes. recvAll returns false on a clean EOF
  // before the first byte; every other failure throws (kRemote for a reset
  // or EOF mid-message, kTimeout past the deadline).
  void sendAll(const void* data, size_t len, Deadline deadline = Deadline::never());
  bool recvAll(void* data, size_t len, Deadline deadline = Deadline::never());
  // Sends every byte described by iov (modified in place). Blocking socket.
  void sendIov(struct iovec* iov, int iovcnt);
  // Sends what the socket buffer takes right now (MSG_DONTWAIT); returns the
  // bytes written, 0 if it is full. Throws on a broken connection.
  size_t sendIovNow(const struct iovec* iov, int iovcnt);
  // One recv(2) call of at most len bytes; returns 0 on EOF; throws on error.
  size_t recvSome(void* data, size_t len);

  void shutdownBoth();
  void close();

 private:
  // What a failed send or receive adds to its errno text when the dead-peer
  // timeout ended it (ETIMEDOUT), else "".
  std::string silentPeer(int err) const;
  int fd_ = -1;
  int deadPeerS_ = 0;  // setDeadPeerTimeout's seconds
};

// Bytes this process's sockets have sent and received so far, over every
// connection of every group (the handshakes' few hundred bytes aside),
// counted per system call with relaxed atomics: what the status page shows
// as a member's wire traffic. Bytes a peer on the same host reads from this
// process's memory (MCCL_LOCAL_READ_BYTES) do not cross a socket and are not
// counted.
struct WireBytes {
  uint64_t sent = 0;
  uint64_t received = 0;
};
WireBytes wireBytes();

}  // namespace mccl
