#include "comm/communicator.h"

#include <algorithm>
#include <cstring>

#include "comm/op_context.h"
#include "util/thread_name.h"
#include "util/check.h"
#include "util/logging.h"
#include "util/random.h"

namespace mccl {

namespace {

constexpr const char* kBootstrapKey = "mccl/v1/bootstrap";
constexpr auto kShutdownGrace = std::chrono::seconds(10);
constexpr auto kCloseGrace = std::chrono::seconds(2);

std::string addrKey(int rank) { return strCat("mccl/v1/addr/", rank); }

std::vector<uint8_t> toBytes(const std::string& s) { return {s.begin(), s.end()}; }

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
    : cfg_(config), store_(std::move(store)), scratch_(64u << 20) {
  groupLabel_ = strCat("group '", cfg_.groupName, "'");
  for (int i = 0; i < cfg_.size; ++i) peers_.push_back(std::make_unique<Peer>());
  Matching::Context mctx;
  mctx.rank = cfg_.rank;
  mctx.size = cfg_.size;
  mctx.group = groupLabel_;
  mctx.peerName = [this](int r) { return peerName(r); };
  matching_ = std::make_unique<Matching>(mctx, cfg_.unexpectedBytes, scratch_);
}

void Communicator::bootstrap() {
  Interface itf = selectInterface(cfg_.socketIfname, cfg_.routeHost);
  interfaceName_ = itf.name;
  identity_.rank = static_cast<uint32_t>(cfg_.rank);
  identity_.size = static_cast<uint32_t>(cfg_.size);
  // Bootstrap record: group id (8 bytes), job secret (32), then rank 0's
  // cost model as text, so that every rank chooses algorithms alike.
  const size_t fixed = 8 + identity_.secret.size();
  std::vector<uint8_t> boot;
  if (cfg_.rank == 0) {
    model_ = cfg_.model;
    model_.sharedHost = itf.loopback;  // then every rank reaches rank 0 over loopback
    model_.localReadBytes = model_.sharedHost ? cfg_.localReadBytes : 0;
    boot.resize(fixed);
    secureRandom(boot.data(), boot.size());
    std::string model = model_.serialize();
    boot.insert(boot.end(), model.begin(), model.end());
    std::lock_guard<std::mutex> lock(storeMu_);
    store_->set(kBootstrapKey, boot);
  } else {
    std::lock_guard<std::mutex> lock(storeMu_);
    boot = store_->get(kBootstrapKey, cfg_.timeout);
  }
  MCCL_USAGE_CHECK(boot.size() >= fixed, selfName(),
                   ": malformed bootstrap record in the store (", boot.size(),
                   " bytes); is another program using the same store prefix?");
  std::memcpy(&identity_.group, boot.data(), 8);
  std::memcpy(identity_.secret.data(), boot.data() + 8, identity_.secret.size());
  if (cfg_.rank != 0) {
    model_ = CostModel::parse(std::string(boot.begin() + static_cast<long>(fixed), boot.end()),
                              "rank 0's cost model");
  }

  listener_ = std::make_unique<Listener>(
      itf.addr, cfg_.portRange, identity_, cfg_.handshakeTimeout,
      [this](Socket sock, uint32_t peer, uint16_t port) {
        if (cfg_.adoptDelayForTesting.count() > 0) std::this_thread::sleep_for(cfg_.adoptDelayForTesting);
        adopt(std::move(sock), static_cast<int>(peer), true, port);
      },
      selfName() + ": ");
  identity_.listenPort = static_cast<uint16_t>(listener_->address().port());
  {
    std::lock_guard<std::mutex> lock(storeMu_);
    store_->set(addrKey(cfg_.rank), toBytes(listener_->address().toString()));
  }
  MCCL_LOG(kInfo, selfName(), ": listening on ", listener_->address().toString(), " (",
           itf.name, ")");
  engine_ = std::thread([this] {
    nameThisThread("mccl-engine");
    engineLoop();
  });
  watchdog_ = std::thread([this] {
    nameThisThread("mccl-watchdog");
    watchdogLoop();
  });
}

Communicator::~Communicator() { shutdown(); }

std::string Communicator::selfName() const {
  return strCat("mccl rank ", cfg_.rank, "/", cfg_.size, " in ", groupLabel_);
}

std::string Communicator::peerName(int rank) const {
  if (rank < 0 || rank >= cfg_.size) return strCat("rank ", rank);
  Peer& p = *peers_[static_cast<size_t>(rank)];
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.addr) return strCat("rank ", rank, " (", p.addr->toString(), ")");
  if (!p.hostHint.empty()) return strCat("rank ", rank, " (", p.hostHint, ")");
  return strCat("rank ", rank);
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
  matching_->failAll(e);
  std::map<std::tuple<int, uint64_t, uint32_t>, PendingSend> waiting;
  {
    std::lock_guard<std::mutex> lock(p2pMu_);
    waiting.swap(rendezvous_);
  }
  for (auto& [key, p] : waiting) p.req->finish(&e);
  // Running ops fail now if they wait, else at their next wait.
  for (auto& op : activeOps()) op->fail(e);
  kickWatchdog();  // failed ops now retire; make it watch them
  // Tell every connected peer, so the whole group fails fast.
  FrameHeader h;
  h.group = identity_.group;
  h.src = identity_.rank;
  for (auto& c : allConnections()) c->postAbort(h, e);
}

std::vector<std::shared_ptr<OpContext>> Communicator::activeOps() {
  std::lock_guard<std::mutex> lock(opsMu_);
  return ops_;
}

std::vector<std::shared_ptr<Connection>> Communicator::allConnections() const {
  std::vector<std::shared_ptr<Connection>> all;
  for (const auto& p : peers_) {
    std::lock_guard<std::mutex> lock(p->mu);
    all.insert(all.end(), p->conns.begin(), p->conns.end());
  }
  return all;
}

size_t Communicator::numConnections() const {
  size_t n = 0;
  for (auto& c : allConnections()) n += c->ended() ? 0 : 1;
  return n;
}

uint64_t Communicator::refFramesSent() const {
  uint64_t n = 0;
  for (auto& c : allConnections()) n += c->refFramesSent();
  return n;
}

size_t Communicator::rejectedConnections() const {
  return listener_ ? listener_->rejected() : 0;
}

void Communicator::interruptConnections() {
  interrupted_.store(true);
  for (auto& c : allConnections()) c->interrupt();
}

void Communicator::abort() {
  poison(Error(ErrorKind::kAborted, strCat(selfName(), ": aborted (abort() was called)")));
  stopThreads(false);
}

void Communicator::shutdown() { stopThreads(true); }

void Communicator::stopThreads(bool graceful) {
  std::lock_guard<std::mutex> life(lifeMu_);
  if (stopped_) return;
  if (graceful) {
    // Let queued collectives finish, within a bound.
    std::unique_lock<std::mutex> lock(qmu_);
    draining_ = true;
    bool idle = qcv_.wait_for(lock, kShutdownGrace, [&] { return queue_.empty() && running_ == 0; });
    draining_ = false;
    lock.unlock();
    if (!idle) {
      MCCL_LOG(kWarn, selfName(), ": shutdown with collectives still pending after ",
               std::chrono::duration_cast<std::chrono::seconds>(kShutdownGrace).count(),
               " s; aborting them");
      poison(Error(ErrorKind::kAborted,
                   strCat(selfName(), ": shut down while the operation was pending")));
    }
  }
  {
    std::lock_guard<std::mutex> lock(qmu_);
    stopping_ = true;
  }
  qcv_.notify_all();
  if (engine_.joinable()) engine_.join();
  // Ops still running (after a failure) retire once their transfers have
  // failed; make sure they do.
  {
    Deadline limit = Deadline::after(std::chrono::seconds(2));
    while (!activeOps().empty() && !limit.expired()) {
      reapOps();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!activeOps().empty()) {
      interruptConnections();
      Deadline hard = Deadline::after(std::chrono::seconds(10));
      while (!activeOps().empty() && !hard.expired()) {
        reapOps();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(wdMu_);
    wdStop_ = true;
  }
  wdCv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (listener_) listener_->stop();

  auto conns = allConnections();
  Deadline grace = Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseGrace));
  if (graceful && !poisoned()) {
    FrameHeader h;
    h.type = FrameType::kClose;
    h.group = identity_.group;
    h.src = identity_.rank;
    // Each CLOSE says how many connections to that peer close: the peer may
    // not have adopted all of them yet (its listener hands a connection over
    // after the handshake's last byte has left), and must not take the peer
    // for gone while frames wait on one it has not started reading.
    for (const auto& p : peers_) {
      std::lock_guard<std::mutex> lock(p->mu);
      h.offset = static_cast<uint64_t>(
          std::count_if(p->conns.begin(), p->conns.end(), [](const auto& c) { return !c->ended(); }));
      for (auto& c : p->conns) c->postClose(h);
    }
    // Peers answer with their own CLOSE and EOF; a vanished peer gives EOF.
    for (auto& c : conns) {
      while (!c->finished() && !grace.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else {
    // Let queued ABORT frames reach the peers before the sockets go.
    for (auto& c : conns) {
      while (!c->sendFinished() && !c->ended() && !grace.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  for (auto& c : conns) c->close();
  matching_->failAll(Error(ErrorKind::kAborted, strCat(selfName(), ": the communicator was shut down")));
  stopped_ = true;
}

// ------------------------------------------------------------- connections

SockAddr Communicator::addressOf(int peer, Deadline deadline) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.addr) return *p.addr;
  }
  std::vector<uint8_t> bytes;
  {
    std::lock_guard<std::mutex> lock(storeMu_);
    auto left = deadline.isNever() ? cfg_.timeout
                                   : std::chrono::duration_cast<std::chrono::milliseconds>(
                                         deadline.time() - Clock::now());
    if (left.count() <= 0) left = std::chrono::milliseconds(1);
    try {
      bytes = store_->get(addrKey(peer), left);
    } catch (const Error& e) {
      throwError(e.kind(), selfName(), ": cannot find the address of rank ", peer,
                 " in the store: ", e.what());
    } catch (const std::exception& e) {
      throwError(ErrorKind::kRemote, selfName(), ": cannot find the address of rank ", peer,
                 " in the store: ", e.what());
    }
  }
  SockAddr a = SockAddr::parse(std::string(bytes.begin(), bytes.end()));
  std::lock_guard<std::mutex> lock(p.mu);
  p.addr = a;
  return a;
}

void Communicator::adopt(Socket sock, int peer, bool accepted, uint16_t peerListenPort) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  sock.setNoDelay();
  sock.setBufferSizes(cfg_.socketBuffer);
  if (accepted) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.hostHint.empty()) {
      SockAddr where = sock.peerAddr();
      if (peerListenPort != 0) where.setPort(peerListenPort);
      p.hostHint = peerListenPort != 0 ? where.toString() : where.host();
    }
  }
  auto conn = std::make_shared<Connection>(std::move(sock), peer, *this,
                                           static_cast<uint32_t>(cfg_.frameBytes),
                                           cfg_.inlineBytes,
                                           strCat("connection to ", peerName(peer)));
  conn->setChecksum(cfg_.checksum);
  if (cfg_.localReadBytes > 0) {
    FrameHeader tmpl;
    tmpl.group = identity_.group;
    tmpl.src = identity_.rank;
    conn->enableLocalReads(cfg_.localReadBytes, tmpl);
  }
  bool stopping;
  {
    std::lock_guard<std::mutex> life(qmu_);
    stopping = stopping_;
  }
  if (stopping) {
    // Too late to serve it: say why before closing, so the peer fails with
    // the cause instead of "connection closed". (Not under p.mu: closing
    // joins the connection's threads, which may need it.)
    lateGoodbye(*conn);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.conns.push_back(conn);
    conn->start();
  }
  p.cv.notify_all();
  if (poisoned()) {
    FrameHeader h;
    h.group = identity_.group;
    h.src = identity_.rank;
    conn->postAbort(h, poisonError());
  }
}

void Communicator::lateGoodbye(Connection& conn) {
  FrameHeader h;
  h.group = identity_.group;
  h.src = identity_.rank;
  if (poisoned()) {
    conn.postAbort(h, poisonError());
  } else {
    h.type = FrameType::kClose;
    conn.postClose(h);
  }
  conn.start();
  Deadline limit = Deadline::after(std::chrono::milliseconds(500));
  while (!conn.sendFinished() && !limit.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  conn.close();
}

std::vector<std::shared_ptr<Connection>> Communicator::connectionsTo(int peer, Deadline deadline) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  std::unique_lock<std::mutex> lock(p.mu);
  for (;;) {
    if (poisoned()) throw poisonError();
    std::vector<std::shared_ptr<Connection>> live;
    for (auto& c : p.conns) {
      if (!c->ended() && !c->peerClosed()) live.push_back(c);
    }
    if (!live.empty()) return live;
    if (p.closed) {
      lock.unlock();  // peerName() takes p.mu
      throwError(ErrorKind::kRemote, selfName(), ": ", peerName(peer),
                 " has shut down its communicator (destroy_process_group or exit) "
                 "but this rank still sends to it; did the ranks run different numbers of "
                 "operations?");
    }
    if (!p.connecting) break;
    if (deadline.isNever()) {
      p.cv.wait(lock);
    } else if (p.cv.wait_until(lock, deadline.time()) == std::cv_status::timeout) {
      lock.unlock();  // peerName() takes p.mu
      throwError(ErrorKind::kTimeout, selfName(), ": timed out waiting to connect to ",
                 peerName(peer));
    }
  }
  p.connecting = true;
  lock.unlock();
  try {
    SockAddr addr = addressOf(peer, deadline);
    for (int i = 0; i < cfg_.nsocksPerPeer; ++i) {
      std::string what = strCat(selfName(), ": connection to ", peerName(peer));
      Socket s = Socket::connect(addr, deadline, what);
      try {
        Deadline hs = deadline.earlier(Deadline::after(cfg_.handshakeTimeout));
        handshakeAsConnector(s, identity_, static_cast<uint32_t>(peer), hs);
      } catch (const Error& e) {
        throwError(e.kind(), what, ": ", e.what());
      }
      adopt(std::move(s), peer, false);
    }
  } catch (...) {
    lock.lock();
    p.connecting = false;
    p.cv.notify_all();
    throw;
  }
  lock.lock();
  p.connecting = false;
  p.cv.notify_all();
  std::vector<std::shared_ptr<Connection>> live;
  for (auto& c : p.conns) {
    if (!c->ended() && !c->peerClosed()) live.push_back(c);
  }
  lock.unlock();  // peerName() takes p.mu
  if (live.empty() && poisoned()) throw poisonError();
  if (live.empty()) {
    throwError(ErrorKind::kRemote, selfName(), ": the connection to ", peerName(peer),
               " closed right after it was opened");
  }
  return live;
}

void Communicator::postSend(const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl,
                            const void* data, Deadline deadline) {
  std::vector<std::shared_ptr<Connection>> conns;
  try {
    conns = connectionsTo(req->peer, deadline);
  } catch (const Error& e) {
    req->finish(&e);
    return;
  }
  const size_t bytes = req->bytes;
  const size_t frame = cfg_.frameBytes;
  const size_t frames = bytes == 0 ? 1 : (bytes + frame - 1) / frame;
  req->setFrames(static_cast<int>(frames), req);
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t rr = peers_[static_cast<size_t>(req->peer)]->next.fetch_add(frames);
  for (size_t i = 0; i < frames; ++i) {
    FrameHeader h = tmpl;
    h.type = FrameType::kData;
    h.offset = i * frame;
    h.length = static_cast<uint32_t>(std::min(frame, bytes - h.offset));
    h.msgBytes = bytes;
    SendFrame f;
    encodeFrame(h, f.header);
    f.payload = p + h.offset;
    f.length = h.length;
    f.cb = req.get();
    conns[(rr + i) % conns.size()]->post(f);
  }
}

// --------------------------------------------------------------- FrameSink

void* Communicator::payloadDest(Connection& c, const FrameHeader& h) {
  if (h.group != identity_.group) {
    throwError(ErrorKind::kRemote, "frame of group ", h.group, " on a connection of group ",
               identity_.group);
  }
  (void)c;
  return matching_->incoming(h);
}

void Communicator::payloadDone(Connection&, const FrameHeader& h, void* dst) {
  matching_->incomingDone(h, dst, true);
}

void Communicator::payloadAborted(Connection&, const FrameHeader& h, void* dst) {
  matching_->incomingDone(h, dst, false);
}

void Communicator::control(Connection& c, const FrameHeader& h, const std::string& text) {
  if (h.type == FrameType::kAbort) {
    // Keep the peer's error kind (a mismatch stays a usage error), except that
    // a peer's own abort() is, from here, a remote failure.
    ErrorKind kind = ErrorKind::kRemote;
    if (h.slot <= static_cast<uint32_t>(ErrorKind::kInternal)) kind = static_cast<ErrorKind>(h.slot);
    if (kind == ErrorKind::kAborted) kind = ErrorKind::kRemote;
    poison(Error(kind, strCat(selfName(), ": ", peerName(c.peer()),
                              " failed and aborted the group: ", text)));
    return;
  }
  if (h.type == FrameType::kRts) {
    if (matching_->incomingRts(h)) sendCts(c.peer(), h.seq, h.slot);
    return;
  }
  if (h.type == FrameType::kCts) {
    PendingSend p;
    {
      std::lock_guard<std::mutex> lock(p2pMu_);
      auto it = rendezvous_.find({c.peer(), h.seq, h.slot});
      if (it == rendezvous_.end()) {
        if (poisoned()) return;  // the send already failed
        throwError(ErrorKind::kRemote, selfName(), ": ", peerName(c.peer()),
                   " sent a clear-to-send for send #", h.seq, " with tag ", h.slot,
                   ", which this rank never announced");
      }
      p = std::move(it->second);
      rendezvous_.erase(it);
    }
    postSend(p.req, p.tmpl, p.data, p.deadline);
    return;
  }
  // CLOSE: the peer is done with this group. Answer in kind so its socket
  // sees our EOF promptly, then refuse further sends to it.
  FrameHeader mine;
  mine.type = FrameType::kClose;
  mine.group = identity_.group;
  mine.src = identity_.rank;
  c.postClose(mine);
}

void Communicator::connectionEnded(Connection& c, const Error* err) {
  Peer& p = *peers_[static_cast<size_t>(c.peer())];
  if (err != nullptr) {
    poison(Error(err->kind(), strCat(selfName(), ": ", err->what())));
    return;
  }
  bool allClosed = true;
  {
    // The peer is gone once every connection here has ended, this one with
    // its goodbye, and goodbyes came on as many connections as the peer
    // said it closes (some may still be in this rank's listener).
    std::lock_guard<std::mutex> lock(p.mu);
    uint64_t announced = 0, said = 0;
    for (auto& x : p.conns) {
      if (x.get() != &c && !x->ended()) allClosed = false;
      uint64_t n = x->peerClosed() ? x->peerCloseCount() : 0;
      announced = std::max(announced, n);
      said += n > 0 ? 1 : 0;
    }
    allClosed = allClosed && c.peerClosed() && said >= announced;
    if (allClosed) p.closed = true;
  }
  p.cv.notify_all();
  if (allClosed) {
    // Everything the peer sent has arrived: whatever else we wait for from it
    // will never come.
    matching_->sourceClosed(static_cast<uint32_t>(c.peer()),
                            Error(ErrorKind::kRemote,
                                  strCat(selfName(), ": ", peerName(c.peer()),
                                         " has shut down its process group (destroy_process_group "
                                         "or exit) while this rank still expects data from it; "
                                         "did the ranks run different numbers of operations?")));
  }
}

// --------------------------------------------------------------------- ops

std::shared_ptr<Work> Communicator::submit(const OpSignature& sig,
                                           std::chrono::milliseconds timeout, Body body,
                                           std::string description, bool small) {
  QueuedOp now;
  std::shared_ptr<Work> work;
  {
    std::unique_lock<std::mutex> lock(qmu_);
    work = std::make_shared<Work>(strCat(selfName(), ": ", description, " #", nextSeq_));
    if (stopping_) {
      work->complete(std::make_exception_ptr(
          Error(ErrorKind::kAborted, strCat(selfName(), ": ", work->description(),
                                            " called after the communicator was shut down"))));
      return work;
    }
    QueuedOp q{nextSeq_++, sig, timeout, std::move(body), work};
    if (!small || !queue_.empty() || running_ >= cfg_.inflightOps) {
      queue_.push_back(std::move(q));
      qcv_.notify_all();  // shutdown() may wait on the same condition
      return work;
    }
    // A small op on an idle group starts here: its first segment only posts
    // receives and writes small frames without blocking, and it saves the
    // hand-off to the engine thread.
    now = std::move(q);
    beginLocked(now, lock);
  }
  startOp(now);
  return work;
}

void Communicator::beginLocked(QueuedOp& q, std::unique_lock<std::mutex>& lock) {
  ++running_;
  // Ops begin in sequence order (this runs under qmu_): frames are checked
  // against the op with their sequence number.
  if (poisoned()) return;
  try {
    matching_->beginOp(q.seq, q.sig);
  } catch (const Error& e) {
    lock.unlock();
    poison(Error(e.kind(), strCat(selfName(), ": ", e.what())));
    lock.lock();
  }
}

void Communicator::engineLoop() {
  for (;;) {
    QueuedOp next;
    {
      std::unique_lock<std::mutex> lock(qmu_);
      qcv_.wait(lock, [&] {
        return (!queue_.empty() && running_ < cfg_.inflightOps) || (stopping_ && queue_.empty());
      });
      if (queue_.empty()) break;  // stopping
      next = std::move(queue_.front());
      queue_.pop_front();
      beginLocked(next, lock);
    }
    startOp(next);
  }
  reapOps();
}

void Communicator::startOp(QueuedOp& q) {
  // Finished ops are freed here (before this one allocates), not by a
  // wake-up of the watchdog per op.
  reapOps();
  if (poisoned()) {
    // Nothing of a poisoned group's op may run: it could touch user memory.
    Error p = poisonError();
    matching_->endOp(q.seq);
    opEnded();
    q.work->complete(std::make_exception_ptr(
        Error(p.kind(), strCat(q.work->description(), " failed: ", p.what()))));
    return;
  }
  auto timeout = q.timeout.count() > 0 ? q.timeout : cfg_.timeout;
  auto op = std::make_shared<OpContext>(*this, q.seq, q.sig, Deadline::after(timeout), q.work);
  {
    std::lock_guard<std::mutex> lock(opsMu_);
    ops_.push_back(op);
  }
  kickWatchdog(op->deadline().time());  // a new deadline to watch
  Task body;
  try {
    body = q.body(*op);
  } catch (...) {
    // Creating the coroutine failed (out of memory): the op fails with that.
    body = [](std::exception_ptr e) -> Task {
      std::rethrow_exception(e);
      co_return;
    }(std::current_exception());
  }
  op->start(std::move(body));
}

void Communicator::opCompleted(uint64_t seq, std::shared_ptr<Work> work,
                               std::exception_ptr error) {
  matching_->endOp(seq);
  opEnded();
  work->complete(error);
}

void Communicator::opEnded() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(qmu_);
    --running_;
    // Only the engine (with ops queued) or shutdown() can be waiting; waking
    // the idle engine after every op would cost a context switch each.
    wake = !queue_.empty() || draining_;
  }
  if (wake) qcv_.notify_all();
}

void Communicator::reapOps() {
  std::vector<std::shared_ptr<OpContext>> done;
  {
    std::lock_guard<std::mutex> lock(opsMu_);
    for (auto it = ops_.begin(); it != ops_.end();) {
      if ((*it)->reapable()) {
        done.push_back(std::move(*it));
        it = ops_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Frames are destroyed here, outside any lock and off their own stacks.
}

// ---------------------------------------------------------- point-to-point

void Communicator::p2pDone(const std::shared_ptr<Work>& work, Transfer& t) {
  if (t.error() != nullptr) {
    const Error& e = *t.error();
    poison(e);
    work->complete(std::make_exception_ptr(Error(e.kind(), strCat(work->description(), " failed: ", e.what()))));
  } else {
    if (t.peerRank() >= 0) work->setSourceRank(t.peerRank());
    work->complete(nullptr);
  }
}

std::shared_ptr<Work> Communicator::send(int peer, uint32_t tag, const void* data, size_t bytes,
                                         DataType dtype, uint64_t count) {
  MCCL_USAGE_CHECK(peer >= 0 && peer < cfg_.size, selfName(), ": send to rank ", peer,
                   " which is outside the group of ", cfg_.size);
  MCCL_USAGE_CHECK(peer != cfg_.rank, selfName(), ": send to itself is not supported");
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(p2pMu_);
    seq = sendCounter_[{peer, tag}]++;
  }
  auto work = std::make_shared<Work>(strCat(selfName(), ": send of ", count, " x ",
                                            dtypeName(dtype), " with tag ", tag, " to ",
                                            peerName(peer)));
  if (poisoned()) {
    Error p = poisonError();
    work->complete(std::make_exception_ptr(
        Error(p.kind(), strCat(work->description(), " failed: ", p.what()))));
    return work;
  }
  auto req = std::make_shared<SendRequest>(peer, MsgKey{1, seq, tag, identity_.rank},
                                           OpKind::kSendRecv, bytes);
  req->onDone = [this, work](Transfer& t) { p2pDone(work, t); };
  FrameHeader h = p2pHeader(seq, tag);
  h.dtype = dtype;
  h.count = count;
  Deadline deadline = Deadline::after(cfg_.timeout);
  watch(deadline, req);
  if (bytes <= cfg_.p2pEagerBytes) {
    postSend(req, h, data, deadline);
    return work;
  }
  // Rendezvous: announce the message; the data follows the receiver's
  // clear-to-send, straight into its posted buffer.
  {
    std::lock_guard<std::mutex> lock(p2pMu_);
    rendezvous_.insert_or_assign({peer, seq, tag}, PendingSend{req, h, data, deadline});
  }
  FrameHeader rts = h;
  rts.type = FrameType::kRts;
  rts.msgBytes = bytes;
  postControl(peer, rts);
  return work;
}

void Communicator::postControl(int peer, const FrameHeader& h) {
  try {
    auto conns = connectionsTo(peer, Deadline::after(cfg_.timeout));
    SendFrame f;
    encodeFrame(h, f.header);
    conns.front()->post(f);
  } catch (const Error& e) {
    poison(e);
  }
}

FrameHeader Communicator::p2pHeader(uint64_t seq, uint32_t tag) const {
  FrameHeader h;
  h.flags = kFlagP2P;
  h.group = identity_.group;
  h.seq = seq;
  h.slot = tag;
  h.src = identity_.rank;
  h.op = OpKind::kSendRecv;
  return h;
}

void Communicator::sendCts(int peer, uint64_t seq, uint32_t tag) {
  FrameHeader h = p2pHeader(seq, tag);
  h.type = FrameType::kCts;
  postControl(peer, h);
}

std::shared_ptr<Work> Communicator::recv(int peer, uint32_t tag, void* data, size_t bytes,
                                         DataType dtype, uint64_t count) {
  MCCL_USAGE_CHECK(peer == kAnySource || (peer >= 0 && peer < cfg_.size), selfName(),
                   ": receive from rank ", peer, " which is outside the group of ", cfg_.size);
  MCCL_USAGE_CHECK(peer != cfg_.rank, selfName(), ": receive from itself is not supported");
  OpSignature sig;
  sig.op = OpKind::kSendRecv;
  sig.dtype = dtype;
  sig.count = count;
  auto work = std::make_shared<Work>(strCat(
      selfName(), ": receive of ", count, " x ", dtypeName(dtype), " with tag ", tag, " from ",
      peer == kAnySource ? std::string("any rank") : peerName(peer)));
  auto req = std::make_shared<RecvRequest>(
      MsgKey{1, 0, tag, static_cast<uint32_t>(peer == kAnySource ? 0 : peer)}, data, bytes, sig);
  req->onDone = [this, work](Transfer& t) { p2pDone(work, t); };
  watch(Deadline::after(cfg_.timeout), req);
  bool cts = peer == kAnySource ? matching_->postAnySource(req) : matching_->post(req);
  if (cts) sendCts(static_cast<int>(req->key.src), req->key.seq, req->key.slot);
  return work;
}

void Communicator::watch(Deadline deadline, std::weak_ptr<Transfer> t) {
  if (deadline.isNever()) return;
  {
    std::lock_guard<std::mutex> lock(wdMu_);
    if (watched_.size() >= 1024) {
      std::erase_if(watched_, [](const auto& kv) {
        auto x = kv.second.lock();
        return !x || x->done();
      });
    }
    watched_.emplace(deadline.time(), std::move(t));
  }
  kickWatchdog(deadline.time());
}

void Communicator::kickWatchdog() { kickWatchdog(Clock::time_point::min()); }

void Communicator::kickWatchdog(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(wdMu_);
    if (deadline >= wdWake_) return;  // it wakes before then and rescans
    ++wdKicks_;
  }
  wdCv_.notify_all();
}

void Communicator::watchdogLoop() {
  constexpr auto kRetireGrace = std::chrono::seconds(1);
  std::unique_lock<std::mutex> lock(wdMu_);
  while (!wdStop_) {
    // Anything that changes what to watch bumps wdKicks_ (under wdMu_), also
    // while this thread scans: a kick during the scan means scan again.
    const uint64_t seen = wdKicks_;
    wdWake_ = Clock::time_point::max();  // while scanning, every kick counts
    // Forget transfers that finished; fail the first one past its deadline.
    auto now = Clock::now();
    while (!watched_.empty()) {
      auto it = watched_.begin();
      auto t = it->second.lock();
      if (!t || t->done()) {
        watched_.erase(it);
        continue;
      }
      if (it->first > now) break;
      watched_.erase(it);
      std::string what = t->describe();
      lock.unlock();
      poison(Error(ErrorKind::kTimeout,
                   strCat(selfName(), ": ", what, " did not complete within the group timeout of ",
                          cfg_.timeout.count() / 1000.0, " s")));
      lock.lock();
    }
    if (poisoned() && !watched_.empty()) watched_.clear();
    Clock::time_point next = watched_.empty() ? Clock::time_point::max() : watched_.begin()->first;
    // Collectives: deadlines of running ops, and ops that failed but still
    // wait for transfers to retire (force those after a grace period).
    lock.unlock();
    bool force = false, rescan = false;
    for (auto& op : activeOps()) {
      Clock::time_point since;
      if (op->retiring(&since)) {
        if (now - since >= kRetireGrace) force = true;
        next = std::min(next, since + kRetireGrace);
      } else if (!op->reapable() && !op->deadline().isNever()) {
        if (op->deadline().expired()) {
          if (op->timeOut()) {
            rescan = true;  // it is retiring now: watch its grace period
          } else {
            // Its coroutine runs elsewhere and fails at its next wait.
            next = std::min(next, now + std::chrono::milliseconds(10));
          }
        } else {
          next = std::min(next, op->deadline().time());
        }
      }
    }
    if (force && !interrupted_.load()) {
      MCCL_LOG(kWarn, selfName(), ": transfers of a failed operation did not stop within ",
               kRetireGrace.count(), " s; closing the connections");
      interruptConnections();
    }
    reapOps();
    lock.lock();
    if (wdStop_) break;
    if (rescan) continue;
    auto changed = [&] { return wdStop_ || wdKicks_ != seen; };
    wdWake_ = next;
    if (next == Clock::time_point::max()) {
      wdCv_.wait(lock, changed);
    } else {
      wdCv_.wait_until(lock, next, changed);
    }
  }
}

}  // namespace mccl
