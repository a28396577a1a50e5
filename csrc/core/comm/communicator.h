// Communicator: one group of ranks. It composes the rooms that do the work,
// each with its own lock and thread contract:
//
//   rendezvous.h  the store: bootstrap record (group id, secret, rank 0's
//                 cost model) and listen addresses
//   links.h       the listener and connections (peers.h) this group shares
//                 with the groups it is shrunk into, and frame routing
//   engine.h      collectives: sequence numbers, queue, engine thread
//   p2p.h         send / recv (eager, or RTS/CTS for large messages)
//   watchdog.h    deadlines, forcing failed ops to retire
//   matching.h    frames to posted receives (and unexpected buffering)
//   abort_relay.h a failure's ABORT to the next live rank no connection
//                 would tell (thread "mccl-relay")
//   peer_probe.h  dials a silent peer this rank waits for, to learn whether
//                 it is gone (thread "mccl-probe")
//
// The other headers of comm/ are values and plumbing the rooms pass around,
// with no thread of their own (docs/architecture.md lists them). The
// communicator owns what spans the rooms: poison (the first error fails
// every pending and later op and tells the peers) and the life cycle
// (abort, shutdown).
//
// Bootstrap (create): each rank listens on an ephemeral port (or one from
// MCCL_PORT_RANGE) of the chosen interface and publishes "host:port" in the
// store; rank 0 publishes a random group id and job secret that every other
// rank reads. No barrier: connections are opened lazily, on first use, and
// authenticated by the handshake (transport/handshake.h).
//
// Shrink (shrink()): the surviving ranks make a smaller group out of this
// one without a rendezvous: it takes this group's links over (the same
// connections and ports; see links.h), renumbers the ranks, and this group
// retires. Frames carry family ranks (the ranks of the group that created
// the links); the communicator translates them to and from its own.
//
// Threads: the public methods may be called from any thread, except that
// abort(), shutdown() and shrink() must not run on an MCCL thread (they join
// them). The LinkOwner methods run on connection receive threads. OpContext
// sees this object only through OpHost.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/abort_relay.h"
#include "comm/config.h"
#include "comm/engine.h"
#include "comm/matching.h"
#include "comm/op_host.h"
#include "comm/links.h"
#include "comm/p2p.h"
#include "comm/peer_probe.h"
#include "comm/rendezvous.h"
#include "comm/scratch.h"
#include "comm/signature.h"
#include "comm/store.h"
#include "comm/watchdog.h"
#include "comm/work.h"
#include "transport/connection.h"
#include "transport/handshake.h"
#include "transport/listener.h"

namespace mccl {

class Communicator final : public OpHost, public LinkOwner {
 public:
  using Body = Engine::Body;

  // Collective: every rank of the group calls it. Throws on bad config or
  // when the store does not answer within config.timeout.
  static std::shared_ptr<Communicator> create(std::shared_ptr<Store> store,
                                              const CommConfig& config);
  ~Communicator() override;

  // ---- OpHost (also public API) -------------------------------------------
  int rank() const override { return cfg_.rank; }
  int size() const override { return cfg_.size; }
  const CommConfig& config() const override { return cfg_; }
  const CostModel& model() const override { return model_; }
  uint64_t groupId() const override { return groupId_; }
  // "mccl rank 1/4 in group 'default_pg'"
  std::string selfName() const override;
  // "rank 2 (10.0.0.2:41000)"
  std::string peerName(int rank) const override;
  std::string connectingTo() const override;
  bool poisoned() const override { return poisoned_.load(std::memory_order_acquire); }
  Error poisonError() const override;
  // Poisons the communicator (first error wins) and tells the peers.
  void poison(const Error& e) override;

  const SockAddr& address() const;
  // The network interface the listener is bound to (e.g. "eth0", "en0").
  const std::string& interfaceName() const { return interfaceName_; }

  // Enqueues a collective; returns without waiting for the network (see
  // engine.h). `timeout` <= 0 means the group's; it counts from when the op
  // starts.
  std::shared_ptr<Work> submit(const OpSignature& sig, std::chrono::milliseconds timeout,
                               Body body, std::string description, bool small = false);

  // Point-to-point, zero copy: `data` must stay valid until the Work
  // completes. peer == kAnySource receives from whichever rank sends first.
  static constexpr int kAnySource = PointToPoint::kAnySource;
  // `timeout` <= 0: the group's.
  std::shared_ptr<Work> send(int peer, uint32_t tag, const void* data, size_t bytes,
                             DataType dtype, uint64_t count,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  std::shared_ptr<Work> recv(int peer, uint32_t tag, void* data, size_t bytes, DataType dtype,
                             uint64_t count,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // A group of this one's ranks but `excluded` (ranks of this group; this
  // rank must not be one), made without a rendezvous: every survivor calls
  // it. It takes over this group's connections, listener and ports; this
  // group retires (its later calls fail, naming the successor). With
  // `abortPending` the ops still queued or running here fail at once
  // (kAborted, naming shrink); else they must have finished (throws a usage
  // error if they do not within the group timeout). A group shrinks once.
  std::shared_ptr<Communicator> shrink(const std::vector<int>& excluded, bool abortPending,
                                       const std::string& groupName);
  // The ranks of this group in the group that created its links.
  const std::vector<int>& familyRanks() const { return members_; }

  // Fails everything with kAborted and joins all threads. Idempotent.
  void abort();
  // Waits (up to 10 s) for queued collectives to finish, says goodbye to
  // peers, then joins all threads. Idempotent.
  void shutdown();

  // Ranks of this group whose connection failed (reset, or closed without a
  // goodbye): what this rank saw die. Elastic recovery reports them.
  std::vector<int> failedPeers() const;
  // Waits (up to the group's timeout) until every rank of the group that
  // made these links has published its listen address, and keeps them:
  // from then on the group connects without the store. Elastic members call
  // it once their group forms, so that they train through a store outage.
  void learnAddresses();

  // Diagnostics: open connections, frames sent by reference to same-host
  // peers, connections the listener closed for failing the handshake.
  size_t numConnections() const;
  uint64_t refFramesSent() const;
  // Frames received with a valid tag (MCCL_WIRE_SECURITY), on this group's links.
  uint64_t sealedFramesReceived() const;
  size_t rejectedConnections() const;
  // Bytes of messages that arrived before their receive was posted.
  size_t unexpectedBytes() const { return matching_.unexpectedBytes(); }

 private:
  Communicator(std::shared_ptr<Store> store, const CommConfig& config);
  // A group made by shrink(): `links` and the agreed `model` come from the
  // parent; `members` maps this group's ranks to family ranks.
  Communicator(const CommConfig& config, std::shared_ptr<Links> links, uint64_t groupId,
               std::vector<int> members, const CostModel& model, std::string interfaceName,
               SockAddr address);
  void bootstrap();
  void startThreads();
  // Records `e` as the group's poison; false when an error came first.
  bool setPoison(const Error& e);
  // Fails every pending op with the poison `e`.
  void failPending(const Error& e);
  // Poisons with `e` here, without telling the peers (the links stay up for
  // the successor).
  void failLocally(const Error& e);
  void stopThreads(bool graceful);
  // Shuts every connection's socket so blocked transfers fail now.
  void interruptConnections();
  // After poison: the ABORT to the next live member this rank has no
  // connection to (abort_relay.h).
  void relayAbort();
  bool reachForAbort(int rank, Deadline deadline);
  // A receive from group rank `peer` is posted: probe it if this rank was
  // never connected to it (peer_probe.h).
  void expectFrom(int peer);
  bool probeNeeded(int peer) const;
  // false when the dial proved nothing (PeerProbe dials again later).
  bool probePeer(int peer, Deadline deadline);
  FrameHeader controlTemplate() const;
  // This group's rank of family rank `wire`, or -1.
  int groupRank(uint32_t wire) const;
  FrameHeader toGroup(const FrameHeader& h) const;
  uint32_t wireRank() const { return static_cast<uint32_t>(members_[static_cast<size_t>(cfg_.rank)]); }
  // Throws when shrink() has retired this group.
  void checkLive(const char* what) const;

  // OpHost, for OpContext.
  void postSend(const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl, const void* data,
                Deadline deadline) override;
  void postRecv(const std::shared_ptr<RecvRequest>& req) override;
  Scratch scratch(size_t bytes) override { return scratch_.get(bytes); }
  void opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error) override;

  // LinkOwner (connection receive threads; ranks are family ranks).
  void* payloadDest(Connection& c, const FrameHeader& h) override;
  void payloadDone(Connection& c, const FrameHeader& h, void* dst) override;
  void payloadAborted(Connection& c, const FrameHeader& h, void* dst) override;
  void control(Connection& c, const FrameHeader& h, const std::string& text) override;
  void linkFailed(int peer, const Error& err) override;
  void peerGone(int peer) override;
  void adopted(Connection& c) override;

  const CommConfig cfg_;
  const std::string groupLabel_;
  std::shared_ptr<Store> store_;
  uint64_t groupId_ = 0;
  std::vector<int> members_;     // group rank -> family rank
  std::vector<int> groupRanks_;  // family rank -> group rank, or -1
  CostModel model_;
  std::string interfaceName_;
  SockAddr address_;
  mutable std::mutex linksMu_;
  std::shared_ptr<Links> links_;  // null once shrink() handed them over
  std::shared_ptr<Links> links() const;
  ScratchPool scratch_;  // before matching_: its buffers return here
  Matching matching_;
  Engine engine_;
  Watchdog watchdog_;
  PointToPoint p2p_;

  mutable std::mutex poisonMu_;
  std::atomic<bool> poisoned_{false};
  std::unique_ptr<Error> poison_;
  std::vector<int> failedPeers_;  // guarded by poisonMu_
  void noteFailedPeer(int g);     // once each
  bool isFailedPeer(int g) const;

  std::mutex lifeMu_;  // serialises abort()/shutdown()/shrink()
  bool stopped_ = false;
  // Set by shrink(): the group that took over (for errors), then the flag.
  std::string successor_;
  std::atomic<bool> retired_{false};

  // Per group rank: a connection to it was seen (the probe is moot).
  std::unique_ptr<std::atomic<bool>[]> connectedOnce_;
  // Last: their threads use the members above.
  AbortRelay relay_;
  PeerProbe probe_;
};

}  // namespace mccl
