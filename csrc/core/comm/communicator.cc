#include "comm/communicator.h"

#include "comm/op_context.h"
#include "util/check.h"
#include "util/logging.h"

namespace mccl {

namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(10);
constexpr auto kCloseGrace = std::chrono::seconds(2);

Matching::Context matchingContext(const CommConfig& cfg, const std::string& label,
                                  std::function<std::string(int)> peerName) {
  Matching::Context m;
  m.rank = cfg.rank;
  m.size = cfg.size;
  m.group = label;
  m.peerName = std::move(peerName);
  return m;
}

}  // namespace

// ---------------------------------------------------------------- lifecycle

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store,
                                                   const CommConfig& config) {
  config.validate();
  std::shared_ptr<Communicator> comm(new Communicator(std::move(store), config));
  comm->bootstrap();
  return comm;
}

Communicator::Communicator(std::shared_ptr<Store> store, const CommConfig& config)
    : cfg_(config),
      groupLabel_(strCat("group '", config.groupName, "'")),
      rendezvous_(std::move(store), strCat("mccl rank ", config.rank, "/", config.size, " in ", groupLabel_)),
      scratch_(64u << 20),
      matching_(matchingContext(cfg_, groupLabel_, [this](int r) { return peerName(r); }),
                cfg_.unexpectedBytes, scratch_),
      peers_(cfg_, identity_, *this, rendezvous_, selfName()),
      engine_(*this, matching_, [this](Clock::time_point d) { watchdog_.kick(d); }),
      watchdog_(*this, engine_, [this] { interruptConnections(); }),
      p2p_(*this, peers_, matching_, watchdog_, identity_) {}

void Communicator::bootstrap() {
  Interface itf = selectInterface(cfg_.socketIfname, cfg_.routeHost);
  interfaceName_ = itf.name;
  // Rank 0's model decides for the group; on one host (rank 0 on loopback,
  // so every rank reaches it over loopback) it prices shared links.
  CostModel mine = cfg_.model;
  mine.sharedHost = itf.loopback;
  mine.localReadBytes = mine.sharedHost ? cfg_.localReadBytes : 0;
  Rendezvous::Record boot = rendezvous_.exchange(cfg_.rank, mine, cfg_.timeout);
  identity_.rank = static_cast<uint32_t>(cfg_.rank);
  identity_.size = static_cast<uint32_t>(cfg_.size);
  identity_.group = boot.group;
  identity_.secret = boot.secret;
  model_ = boot.model;

  listener_ = std::make_unique<Listener>(
      itf.addr, cfg_.portRange, identity_, cfg_.handshakeTimeout,
      [this](Socket sock, uint32_t peer, uint16_t port) {
        if (cfg_.adoptDelayForTesting.count() > 0) std::this_thread::sleep_for(cfg_.adoptDelayForTesting);
        peers_.adopt(std::move(sock), static_cast<int>(peer), true, port);
      },
      selfName() + ": ");
  identity_.listenPort = static_cast<uint16_t>(listener_->address().port());
  rendezvous_.publishAddress(cfg_.rank, listener_->address());
  MCCL_LOG(kInfo, selfName(), ": listening on ", listener_->address().toString(), " (", itf.name, ")");
  engine_.start();
  watchdog_.start();
}

Communicator::~Communicator() { shutdown(); }

std::string Communicator::selfName() const {
  return strCat("mccl rank ", cfg_.rank, "/", cfg_.size, " in ", groupLabel_);
}

std::string Communicator::peerName(int rank) const { return peers_.name(rank); }

FrameHeader Communicator::controlTemplate() const {
  FrameHeader h;
  h.group = identity_.group;
  h.src = identity_.rank;
  return h;
}

Error Communicator::poisonError() const {
  std::lock_guard<std::mutex> lock(poisonMu_);
  MCCL_CHECK(poison_ != nullptr);
  return *poison_;
}

void Communicator::poison(const Error& e) {
  {
    std::lock_guard<std::mutex> lock(poisonMu_);
    if (poison_) return;
    poison_ = std::make_unique<Error>(e);
    poisoned_.store(true, std::memory_order_release);
  }
  if (e.kind() != ErrorKind::kAborted) MCCL_LOG(kWarn, e.what());
  matching_.failAll(e);
  p2p_.failAll(e);
  // Running ops fail now if they wait, else at their next wait.
  for (auto& op : engine_.active()) op->fail(e);
  watchdog_.kick();  // failed ops now retire; make it watch them
  // Tell every connected peer, so the whole group fails fast.
  peers_.abortAll(e, controlTemplate());
}

void Communicator::interruptConnections() { peers_.interrupt(); }

void Communicator::abort() {
  poison(Error(ErrorKind::kAborted, strCat(selfName(), ": aborted (abort() was called)")));
  stopThreads(false);
}

void Communicator::shutdown() { stopThreads(true); }

void Communicator::stopThreads(bool graceful) {
  std::lock_guard<std::mutex> life(lifeMu_);
  if (stopped_) return;
  // Let queued collectives finish, within a bound.
  if (graceful && !engine_.drain(kShutdownGrace)) {
    MCCL_LOG(kWarn, selfName(), ": shutdown with collectives still pending after ",
             std::chrono::duration_cast<std::chrono::seconds>(kShutdownGrace).count(),
             " s; aborting them");
    poison(Error(ErrorKind::kAborted, strCat(selfName(), ": shut down while the operation was pending")));
  }
  peers_.stopAccepting();
  engine_.stop();
  // Ops still running (after a failure) retire once their transfers have
  // failed; make sure they do.
  engine_.retire([this] { interruptConnections(); });
  watchdog_.stop();
  if (listener_) listener_->stop();
  Deadline grace = Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseGrace));
  peers_.closeAll(graceful && !poisoned(), controlTemplate(), grace);
  matching_.failAll(Error(ErrorKind::kAborted, strCat(selfName(), ": the communicator was shut down")));
  stopped_ = true;
}

size_t Communicator::numConnections() const { return peers_.open(); }

uint64_t Communicator::refFramesSent() const { return peers_.refFramesSent(); }

size_t Communicator::rejectedConnections() const { return listener_ ? listener_->rejected() : 0; }

// --------------------------------------------------------------------- ops

std::shared_ptr<Work> Communicator::submit(const OpSignature& sig, std::chrono::milliseconds timeout,
                                           Body body, std::string description, bool small) {
  return engine_.submit(sig, timeout, std::move(body), std::move(description), small);
}

void Communicator::opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error) {
  engine_.opCompleted(seq, std::move(work), error);
}

void Communicator::postSend(const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl,
                            const void* data, Deadline deadline) {
  peers_.postSend(req, tmpl, data, deadline);
}

void Communicator::postRecv(const std::shared_ptr<RecvRequest>& req) { matching_.post(req); }

std::shared_ptr<Work> Communicator::send(int peer, uint32_t tag, const void* data, size_t bytes,
                                         DataType dtype, uint64_t count) {
  return p2p_.send(peer, tag, data, bytes, dtype, count);
}

std::shared_ptr<Work> Communicator::recv(int peer, uint32_t tag, void* data, size_t bytes,
                                         DataType dtype, uint64_t count) {
  return p2p_.recv(peer, tag, data, bytes, dtype, count);
}

// --------------------------------------------------------------- FrameSink

void* Communicator::payloadDest(Connection&, const FrameHeader& h) {
  if (h.group != identity_.group) {
    throwError(ErrorKind::kRemote, "frame of group ", h.group, " on a connection of group ",
               identity_.group);
  }
  return matching_.incoming(h);
}

void Communicator::payloadDone(Connection&, const FrameHeader& h, void* dst) {
  matching_.incomingDone(h, dst, true);
}

void Communicator::payloadAborted(Connection&, const FrameHeader& h, void* dst) {
  matching_.incomingDone(h, dst, false);
}

void Communicator::control(Connection& c, const FrameHeader& h, const std::string& text) {
  switch (h.type) {
    case FrameType::kAbort: {
      // Keep the peer's error kind (a mismatch stays a usage error), except
      // that a peer's own abort() is, from here, a remote failure.
      ErrorKind kind = ErrorKind::kRemote;
      if (h.slot <= static_cast<uint32_t>(ErrorKind::kInternal)) kind = static_cast<ErrorKind>(h.slot);
      if (kind == ErrorKind::kAborted) kind = ErrorKind::kRemote;
      poison(Error(kind, strCat(selfName(), ": ", peerName(c.peer()), " failed and aborted the group: ", text)));
      return;
    }
    case FrameType::kRts:
      p2p_.onRts(c.peer(), h);
      return;
    case FrameType::kCts:
      p2p_.onCts(c.peer(), h);
      return;
    default: {
      // CLOSE: the peer is done with this group. Answer in kind so its socket
      // sees our EOF promptly, then refuse further sends to it.
      FrameHeader mine = controlTemplate();
      mine.type = FrameType::kClose;
      c.postClose(mine);
    }
  }
}

void Communicator::connectionEnded(Connection& c, const Error* err) {
  if (err != nullptr) {
    poison(Error(err->kind(), strCat(selfName(), ": ", err->what())));
    return;
  }
  if (peers_.connectionEnded(c, err)) {
    // Everything the peer sent has arrived: whatever else we wait for from it
    // will never come.
    matching_.sourceClosed(static_cast<uint32_t>(c.peer()),
                           Error(ErrorKind::kRemote,
                                 strCat(selfName(), ": ", peerName(c.peer()),
                                        " has shut down its process group (destroy_process_group "
                                        "or exit) while this rank still expects data from it; "
                                        "did the ranks run different numbers of operations?")));
  }
}

}  // namespace mccl
