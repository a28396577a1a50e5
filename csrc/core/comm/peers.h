// Peers: the connections to the other processes of a family of groups
// (links.h), by family rank.
//
// Connections open lazily, on the first send to a peer (connect, then the
// handshake proves both ends belong to the job), or arrive through the
// listener. Messages are split into frames striped over a peer's
// connections. The goodbye bookkeeping lives here too: a peer is gone
// cleanly once goodbyes (CLOSE) came on as many connections as it said it
// closes, which tells a peer that shut down from one that vanished.
//
// Threads: connectionsTo(), postSend() and postControl() from any thread
// that runs an op; adopt() from the listener's handshake threads;
// connectionEnded() from connection receive threads; stopAccepting(),
// sayGoodbye() and closeAll() from the thread that shuts the group down.
// Each peer has its own lock; none is held while connecting or while a
// connection's threads are joined.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/config.h"
#include "comm/rendezvous.h"
#include "comm/transfer.h"
#include "transport/connection.h"
#include "transport/handshake.h"
#include "util/time.h"

namespace mccl {

class Peers {
 public:
  // Connections deliver their frames to `sink`; `adopted` hears of each new
  // one once it runs. `selfName` prefixes errors.
  Peers(const CommConfig& cfg, const Identity& identity, FrameSink& sink, Rendezvous& rendezvous,
        std::string selfName, std::function<void(Connection&)> adopted,
        std::function<void(int, const Error&)> refused);

  // " (10.0.0.2:41000)" for `rank`'s address, or "" before anything is known.
  std::string where(int rank) const;

  // An authenticated socket to `peer` (from the listener when `accepted`,
  // with the peer's listen port for messages) becomes one of its
  // connections. After stopAccepting() it is told goodbye and closed.
  void adopt(Socket sock, int peer, bool accepted, const SessionKey& key,
             uint16_t peerListenPort = 0);
  // The live connections to `peer`, connecting first if there are none.
  // Throws naming the peer when it shut down or the connection cannot be
  // made before `deadline`.
  std::vector<std::shared_ptr<Connection>> connectionsTo(int peer, Deadline deadline);
  // Splits req's message (req->bytes at `data`) into frames of at most
  // MCCL_FRAME_BYTES striped over the connections to `peer`; `tmpl`
  // carries everything but offset, length and message size. Failures
  // finish `req`.
  void postSend(int peer, const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl,
                const void* data, Deadline deadline);
  // A frame without payload (RTS, CTS) to `peer`; throws on failure.
  void postControl(int peer, const FrameHeader& h, Deadline deadline);

  // A connection ended cleanly (its receive thread): whether the peer is
  // now gone (every connection ended, goodbyes on as many as it announced).
  bool connectionEnded(Connection& c);

  // Waits (until `deadline`) for every other rank's listen address and
  // remembers them all: later connections need no store (it may be away,
  // or have restarted without them). Throws naming the first rank missing.
  void learnAddresses(Deadline deadline);

  // Whether `peer` has a connection that is up (not ended, no goodbye).
  bool connected(int peer) const;
  // A probe of `peer` (comm/peer_probe.h): connects as connectionsTo()
  // does, but a refused handshake does not report the peer as refusing (the
  // listener of a live peer may drop handshakes in a burst), and the answer
  // says only what the dial proves.
  enum class Probe {
    kConnected,  // connected now, or was already
    kRefused,    // nothing listens at its address: its process or group is gone
    kUnknown,    // not proven either way (slow, no address yet, local error)
  };
  Probe probe(int peer, Deadline deadline, std::string* why);
  // The peers this rank is connecting to now, each with whether its address
  // is known (false: waiting for it to appear in the store), for the
  // message of an op that times out meanwhile.
  std::vector<std::pair<int, bool>> connecting() const;
  // Whether a connection to `peer` was ever adopted (one atomic load).
  bool everConnected(int peer) const { return at(peer).connectedOnce.load(std::memory_order_acquire); }
  // A group's ABORT (connections stay up) to every connection of `peer`.
  void abortGroup(int peer, const FrameHeader& tmpl, const Error& e);
  // Says goodbye on the connections to `peer` (a CLOSE built from `tmpl`,
  // so it sees a clean end) and closes them: it left the links' group.
  void drop(int peer, const FrameHeader& tmpl);
  // Shuts every connection's socket so blocked transfers fail now.
  void interrupt();
  // Sockets adopted from now on are told goodbye and closed.
  void stopAccepting();
  // Graceful end: a CLOSE on every connection (each says how many
  // connections to that peer close), then waits up to `grace` for the peers'
  // own CLOSE and EOF. Otherwise an ABORT carrying `why` (when given) ends
  // every connection, and it waits only for that to leave. Then closes every
  // connection.
  void closeAll(bool graceful, const FrameHeader& tmpl, Deadline grace, const Error* why = nullptr);

  std::vector<std::shared_ptr<Connection>> all() const;
  size_t open() const;          // connections not yet ended
  uint64_t refFramesSent() const;
  uint64_t framesOpened() const;

 private:
  struct Peer {
    std::string hostHint;  // address seen on an accepted connection
    mutable std::mutex mu;
    std::condition_variable cv;
    std::vector<std::shared_ptr<Connection>> conns;
    std::optional<SockAddr> addr;
    bool connecting = false;
    bool closed = false;  // the peer shut down cleanly
    std::atomic<bool> connectedOnce{false};
    std::atomic<uint64_t> next{0};  // round-robin over conns
  };
  Peer& at(int rank) const { return *peers_[static_cast<size_t>(rank)]; }
  SockAddr addressOf(int peer, Deadline deadline);
  // `probing`: a refused handshake is not reported through refused_, and
  // *refusedAtConnect says whether the TCP connect itself was refused.
  void connect(int peer, Deadline deadline, bool probing = false, bool* refusedAtConnect = nullptr);
  // Too late to serve a connection: say why, then close it.
  void lateGoodbye(Connection& conn);

  const CommConfig& cfg_;
  const Identity& identity_;
  FrameSink& sink_;
  Rendezvous& rendezvous_;
  const std::string self_;
  const std::function<void(Connection&)> adopted_;
  // A peer refused this rank's handshake (another job secret, group or
  // size): the group cannot work, so it fails now instead of at a timeout.
  const std::function<void(int, const Error&)> refused_;
  std::vector<std::unique_ptr<Peer>> peers_;

  mutable std::mutex stateMu_;
  bool accepting_ = true;
};

}  // namespace mccl
