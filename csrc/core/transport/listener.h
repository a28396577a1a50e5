// The listening side of a communicator: accepts TCP connections and runs the
// acceptor handshake for each, on one thread with poll(2).
//
// Authenticated sockets are handed to the callback (on the listener thread;
// the callback must not block for long). Everything else is closed and
// logged with a rate limit, so a port scanner or a flood of half-open
// connections neither blocks legitimate peers nor floods the log.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "transport/handshake.h"
#include "transport/socket.h"
#include "util/logging.h"

namespace mccl {

// Parses "LOW-HIGH" (decimal digits only, 1 <= LOW <= HIGH <= 65535).
bool parsePortRange(const std::string& range, int* lo, int* hi);

class Listener {
 public:
  using OnPeer = std::function<void(Socket sock, uint32_t peerRank, uint16_t peerListenPort,
                                    const SessionKey& key)>;

  // Binds on `addr`'s host: an ephemeral port, or the first free port of
  // portRange ("LOW-HIGH"). Throws kUsage/kSystem if nothing can be bound.
  Listener(const SockAddr& addr, const std::string& portRange, const Identity& self,
           std::chrono::milliseconds handshakeTimeout, OnPeer onPeer, std::string logPrefix);
  ~Listener();

  const SockAddr& address() const { return addr_; }
  // Stops accepting and joins the thread. Idempotent.
  void stop();
  // Connections rejected so far (for tests and diagnostics).
  uint64_t rejected() const { return rejected_.load(); }

 private:
  void loop();

  Socket sock_;
  SockAddr addr_;
  const Identity& self_;
  const std::chrono::milliseconds handshakeTimeout_;
  OnPeer onPeer_;
  std::string logPrefix_;
  int wakeRead_ = -1, wakeWrite_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rejected_{0};
  RateLimiter rejectLog_{5, std::chrono::seconds(10)};
  std::thread thread_;
};

}  // namespace mccl
