// Communicator: one group of ranks. It composes the rooms that do the work,
// each with its own lock and thread contract:
//
//   rendezvous.h  the store: bootstrap record (group id, secret, rank 0's
//                 cost model) and listen addresses
//   peers.h       connections to the other ranks, frame striping, goodbyes
//   engine.h      collectives: sequence numbers, queue, engine thread
//   p2p.h         send / recv (eager, or RTS/CTS for large messages)
//   watchdog.h    deadlines, forcing failed ops to retire
//   matching.h    frames to posted receives (and unexpected buffering)
//
// and owns what spans them: poison (the first error fails every pending and
// later op and tells the peers) and the life cycle (abort, shutdown).
//
// Bootstrap (create): each rank listens on an ephemeral port (or one from
// MCCL_PORT_RANGE) of the chosen interface and publishes "host:port" in the
// store; rank 0 publishes a random group id and job secret that every other
// rank reads. No barrier: connections are opened lazily, on first use, and
// authenticated by the handshake (transport/handshake.h).
//
// Threads: the public methods may be called from any thread, except that
// abort() and shutdown() must not run on an MCCL thread (they join them).
// The FrameSink methods run on connection receive threads. OpContext sees
// this object only through OpHost.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "comm/config.h"
#include "comm/engine.h"
#include "comm/matching.h"
#include "comm/op_host.h"
#include "comm/p2p.h"
#include "comm/peers.h"
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

class Communicator final : public OpHost, public FrameSink {
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
  uint64_t groupId() const override { return identity_.group; }
  // "mccl rank 1/4 in group 'default_pg'"
  std::string selfName() const override;
  // "rank 2 (10.0.0.2:41000)"
  std::string peerName(int rank) const override;
  bool poisoned() const override { return poisoned_.load(std::memory_order_acquire); }
  Error poisonError() const override;
  // Poisons the communicator (first error wins) and tells the peers.
  void poison(const Error& e) override;

  const SockAddr& address() const { return listener_->address(); }
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
  std::shared_ptr<Work> send(int peer, uint32_t tag, const void* data, size_t bytes,
                             DataType dtype, uint64_t count);
  std::shared_ptr<Work> recv(int peer, uint32_t tag, void* data, size_t bytes, DataType dtype,
                             uint64_t count);

  // Fails everything with kAborted and joins all threads. Idempotent.
  void abort();
  // Waits (up to 10 s) for queued collectives to finish, says goodbye to
  // peers, then joins all threads. Idempotent.
  void shutdown();

  // Diagnostics: open connections, frames sent by reference to same-host
  // peers, connections the listener closed for failing the handshake.
  size_t numConnections() const;
  uint64_t refFramesSent() const;
  size_t rejectedConnections() const;

 private:
  Communicator(std::shared_ptr<Store> store, const CommConfig& config);
  void bootstrap();
  void stopThreads(bool graceful);
  // Shuts every connection's socket so blocked transfers fail now.
  void interruptConnections();
  FrameHeader controlTemplate() const;

  // OpHost, for OpContext.
  void postSend(const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl, const void* data,
                Deadline deadline) override;
  void postRecv(const std::shared_ptr<RecvRequest>& req) override;
  Scratch scratch(size_t bytes) override { return scratch_.get(bytes); }
  void opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error) override;

  // FrameSink (connection receive threads).
  void* payloadDest(Connection& c, const FrameHeader& h) override;
  void payloadDone(Connection& c, const FrameHeader& h, void* dst) override;
  void payloadAborted(Connection& c, const FrameHeader& h, void* dst) override;
  void control(Connection& c, const FrameHeader& h, const std::string& text) override;
  void connectionEnded(Connection& c, const Error* err) override;

  const CommConfig cfg_;
  const std::string groupLabel_;
  Identity identity_;
  CostModel model_;
  std::string interfaceName_;
  Rendezvous rendezvous_;
  ScratchPool scratch_;  // before matching_: its buffers return here
  Matching matching_;
  Peers peers_;
  Engine engine_;
  Watchdog watchdog_;
  PointToPoint p2p_;
  std::unique_ptr<Listener> listener_;

  mutable std::mutex poisonMu_;
  std::atomic<bool> poisoned_{false};
  std::unique_ptr<Error> poison_;

  std::mutex lifeMu_;  // serialises abort()/shutdown()
  bool stopped_ = false;
};

}  // namespace mccl
