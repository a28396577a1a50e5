// Communicator: one group of ranks, its connections, its matching engine and
// the workers that run its collectives.
//
// Bootstrap (create): each rank listens on an ephemeral port (or one from
// MCCL_PORT_RANGE) of the chosen interface and publishes "host:port" in the
// store; rank 0 publishes a random group id and job secret that every other
// rank reads. No barrier: connections are opened lazily, on first use, and
// authenticated by the handshake (transport/handshake.h).
//
// Ordering: submit() assigns each collective the next sequence number of the
// group, in call order. The engine thread starts them in that order, up to
// MCCL_INFLIGHT_OPS at a time, so several can be on the wire at once; an
// op's algorithm is a coroutine that the connection threads resume as its
// transfers complete. Point-to-point traffic has its own counters per
// (peer, tag) and never takes a sequence number.
//
// Failure: the first error poisons the communicator. Every pending and later
// operation fails with that error; peers are told with an ABORT frame so
// they fail fast too. abort() and shutdown() join every thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/config.h"
#include "comm/matching.h"
#include "comm/scratch.h"
#include "comm/signature.h"
#include "comm/store.h"
#include "comm/task.h"
#include "comm/transfer.h"
#include "comm/work.h"
#include "transport/connection.h"
#include "transport/handshake.h"
#include "transport/listener.h"

namespace mccl {

class OpContext;

class Communicator : public FrameSink, public std::enable_shared_from_this<Communicator> {
 public:
  // Creates the op's algorithm coroutine (not yet started).
  using Body = std::function<Task(OpContext&)>;

  // Collective: every rank of the group calls it. Throws on bad config or
  // when the store does not answer within config.timeout.
  static std::shared_ptr<Communicator> create(std::shared_ptr<Store> store,
                                              const CommConfig& config);
  ~Communicator() override;

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.size; }
  const CommConfig& config() const { return cfg_; }
  // The group's cost model: rank 0's, agreed at bootstrap.
  const CostModel& model() const { return model_; }
  const SockAddr& address() const { return listener_->address(); }
  // The network interface the listener is bound to (e.g. "eth0", "en0").
  const std::string& interfaceName() const { return interfaceName_; }
  uint64_t groupId() const { return identity_.group; }
  // "rank 2 (10.0.0.2:41000)"
  std::string peerName(int rank) const;
  // "mccl rank 1/4 in group 'default_pg'"
  std::string selfName() const;

  // Enqueues a collective; returns without waiting for the network.
  // `timeout` <= 0 means the group's; it counts from when the op starts. A
  // `small` op on an idle group is started on the calling thread (its first
  // segment only posts and writes without blocking); others by the engine
  // thread. Thread-safe.
  std::shared_ptr<Work> submit(const OpSignature& sig, std::chrono::milliseconds timeout,
                               Body body, std::string description, bool small = false);

  // Point-to-point, zero copy: `data` must stay valid until the Work
  // completes. peer == kAnySource receives from whichever rank sends first.
  static constexpr int kAnySource = -1;
  std::shared_ptr<Work> send(int peer, uint32_t tag, const void* data, size_t bytes,
                             DataType dtype, uint64_t count);
  std::shared_ptr<Work> recv(int peer, uint32_t tag, void* data, size_t bytes, DataType dtype,
                             uint64_t count);

  // Fails everything with kAborted and joins all threads. Idempotent.
  void abort();
  // Waits (up to the group timeout) for queued collectives to finish, says
  // goodbye to peers, then joins all threads. Idempotent.
  void shutdown();

  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }
  // The poisoning error; only valid when poisoned().
  Error poisonError() const;
  // Poisons the communicator (first error wins) and tells the peers.
  void poison(const Error& e);

  // ---- used by OpContext -------------------------------------------------
  // Splits the message into frames (<= MCCL_FRAME_BYTES) striped over the
  // connections to req->peer, connecting first if needed. `tmpl` carries
  // everything but offset/length/msgBytes. Failures finish `req`.
  void postSend(const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl,
                const void* data, Deadline deadline);
  Matching& matching() { return *matching_; }
  ScratchPool& scratch() { return scratch_; }
  // Shuts every connection's socket so blocked transfers fail now.
  void interruptConnections();
  // An op's Work is final: bookkeeping, then completes `work` (callbacks run
  // on this thread). Called once per op, from any thread.
  void opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error);
  void opEnded();  // one op fewer running; wakes whoever must know

  // FrameSink (connection receive threads).
  void* payloadDest(Connection& c, const FrameHeader& h) override;
  void payloadDone(Connection& c, const FrameHeader& h, void* dst) override;
  void payloadAborted(Connection& c, const FrameHeader& h, void* dst) override;
  void control(Connection& c, const FrameHeader& h, const std::string& text) override;
  void connectionEnded(Connection& c, const Error* err) override;

  // Diagnostics for tests: open connections and unexpected bytes buffered.
  size_t numConnections() const;
  // Frames sent by reference to same-host peers (diagnostics).
  uint64_t refFramesSent() const;
  // Connections the listener closed for failing the handshake (diagnostics).
  size_t rejectedConnections() const;

 private:
  struct Peer {
    std::string hostHint;  // address seen on an accepted connection
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::shared_ptr<Connection>> conns;
    std::optional<SockAddr> addr;
    bool connecting = false;
    bool closed = false;  // the peer shut down cleanly
    std::atomic<uint64_t> next{0};  // round-robin over conns
  };
  struct QueuedOp {
    uint64_t seq;
    OpSignature sig;
    std::chrono::milliseconds timeout;
    Body body;
    std::shared_ptr<Work> work;
  };

  Communicator(std::shared_ptr<Store> store, const CommConfig& config);
  void bootstrap();
  void engineLoop();
  void startOp(QueuedOp& task);
  void beginLocked(QueuedOp& q, std::unique_lock<std::mutex>& lock);
  void reapOps();
  std::vector<std::shared_ptr<OpContext>> activeOps();
  void adopt(Socket sock, int peer, bool accepted, uint16_t peerListenPort = 0);
  void lateGoodbye(Connection& conn);
  std::vector<std::shared_ptr<Connection>> connectionsTo(int peer, Deadline deadline);
  SockAddr addressOf(int peer, Deadline deadline);
  void stopThreads(bool graceful);
  void watchdogLoop();
  // Sends a frame without payload (RTS/CTS) to `peer`; failures poison.
  void postControl(int peer, const FrameHeader& h);
  void sendCts(int peer, uint64_t seq, uint32_t tag);
  void watch(Deadline deadline, std::weak_ptr<Transfer> t);
  // Makes the watchdog rescan; with a deadline, only when it would not wake
  // before that deadline anyway (one wake-up per op would cost every small
  // op a context switch).
  void kickWatchdog();
  void kickWatchdog(Clock::time_point deadline);
  // Header of point-to-point message #seq with `tag` from this rank.
  FrameHeader p2pHeader(uint64_t seq, uint32_t tag) const;
  void p2pDone(const std::shared_ptr<Work>& work, Transfer& t);
  std::vector<std::shared_ptr<Connection>> allConnections() const;

  const CommConfig cfg_;
  std::shared_ptr<Store> store_;
  Identity identity_;
  CostModel model_;
  std::string interfaceName_;
  std::string groupLabel_;
  ScratchPool scratch_;  // before matching_: its buffers return here
  std::unique_ptr<Matching> matching_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Peer>> peers_;

  // Ops: queued (qmu_), then running (opsMu_).
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<QueuedOp> queue_;
  uint64_t nextSeq_ = 0;
  int running_ = 0;
  bool stopping_ = false;
  bool draining_ = false;  // shutdown() waits on qcv_ for the queue to drain
  std::thread engine_;
  std::mutex opsMu_;
  std::vector<std::shared_ptr<OpContext>> ops_;
  std::atomic<bool> interrupted_{false};

  // p2p send counters per (peer, tag), and large sends waiting for their
  // clear-to-send, by (peer, counter, tag).
  struct PendingSend {
    std::shared_ptr<SendRequest> req;
    FrameHeader tmpl;
    const void* data = nullptr;
    Deadline deadline = Deadline::never();
  };
  std::mutex p2pMu_;
  std::map<std::pair<int, uint32_t>, uint64_t> sendCounter_;
  std::map<std::tuple<int, uint64_t, uint32_t>, PendingSend> rendezvous_;

  // Store access is serialised (c10d stores are not all thread-safe).
  std::mutex storeMu_;

  // Deadlines: point-to-point transfers here, collectives in ops_.
  std::mutex wdMu_;
  std::condition_variable wdCv_;
  std::multimap<Clock::time_point, std::weak_ptr<Transfer>> watched_;
  bool wdStop_ = false;
  uint64_t wdKicks_ = 0;  // bumped whenever the watchdog must rescan
  // When the sleeping watchdog wakes on its own (max while it scans, or when
  // it has nothing to watch): a deadline after that needs no wake-up.
  Clock::time_point wdWake_ = Clock::time_point::max();
  std::thread watchdog_;

  // Poison.
  mutable std::mutex poisonMu_;
  std::atomic<bool> poisoned_{false};
  std::unique_ptr<Error> poison_;

  std::mutex lifeMu_;  // serialises abort()/shutdown()
  bool stopped_ = false;
};

}  // namespace mccl
