#include "comm/peers.h"

#include <algorithm>
#include <cerrno>

#include "util/check.h"
#include "util/logging.h"

namespace mccl {

namespace {
// A connection that still carries frames both ways (not ended, no goodbye).
bool isUp(const std::shared_ptr<Connection>& c) { return !c->ended() && !c->peerClosed(); }
}  // namespace

Peers::Peers(const CommConfig& cfg, const Identity& identity, FrameSink& sink,
             Rendezvous& rendezvous, std::string selfName, std::function<void(Connection&)> adopted,
             std::function<void(int, const Error&)> refused)
    : cfg_(cfg),
      identity_(identity),
      sink_(sink),
      rendezvous_(rendezvous),
      self_(std::move(selfName)),
      adopted_(std::move(adopted)),
      refused_(std::move(refused)) {
  for (int i = 0; i < cfg_.size; ++i) peers_.push_back(std::make_unique<Peer>());
}

std::string Peers::where(int rank) const {
  if (rank < 0 || rank >= cfg_.size) return "";
  Peer& p = at(rank);
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.addr) return strCat(" (", p.addr->toString(), ")");
  if (!p.hostHint.empty()) return strCat(" (", p.hostHint, ")");
  return "";
}

std::vector<std::pair<int, bool>> Peers::connecting() const {
  std::vector<std::pair<int, bool>> out;
  for (int r = 0; r < cfg_.size; ++r) {
    Peer& p = at(r);
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.connecting) out.emplace_back(r, p.addr.has_value());
  }
  return out;
}

SockAddr Peers::addressOf(int peer, Deadline deadline) {
  Peer& p = at(peer);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.addr) return *p.addr;
  }
  SockAddr a = rendezvous_.addressOf(peer, deadline, cfg_.timeout);
  std::lock_guard<std::mutex> lock(p.mu);
  p.addr = a;
  return a;
}

void Peers::learnAddresses(Deadline deadline) {
  for (int r = 0; r < cfg_.size; ++r) {
    if (r != cfg_.rank) addressOf(r, deadline);
  }
}

void Peers::adopt(Socket sock, int peer, bool accepted, const SessionKey& key,
                  uint16_t peerListenPort) {
  Peer& p = at(peer);
  sock.setNoDelay();
  sock.setBufferSizes(cfg_.socketBuffer);
  sock.setDeadPeerTimeout(cfg_.keepaliveS);
  if (!cfg_.tcpCongestion.empty()) {
    // Checked when the group was made; refused now only if the host's
    // settings changed since. The connection keeps the system's default.
    try {
      sock.setCongestion(cfg_.tcpCongestion);
    } catch (const Error& e) {
      static RateLimiter warnings(1, std::chrono::minutes(10));
      uint64_t dropped = 0;
      if (warnings.allow(&dropped)) MCCL_LOG(kWarn, e.what(), "; this connection keeps the system's default");
    }
  }
  if (accepted) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.hostHint.empty()) {
      SockAddr where = sock.peerAddr();
      if (peerListenPort != 0) where.setPort(peerListenPort);
      p.hostHint = peerListenPort != 0 ? where.toString() : where.host();
    }
  }
  auto conn = std::make_shared<Connection>(std::move(sock), peer, sink_,
                                           static_cast<uint32_t>(cfg_.frameBytes), cfg_.inlineBytes,
                                           strCat("connection to rank ", peer, where(peer)));
  conn->setChecksum(cfg_.checksum);
  if (cfg_.wireSecurity != "off") {
    const auto self = identity_.rank, other = static_cast<uint32_t>(peer);
    conn->enableSealing(cfg_.wireSecurity == "encrypt", wireKey(key, cfg_.wireSecurity, self, other),
                        wireKey(key, cfg_.wireSecurity, other, self));
  }
  if (cfg_.localReadBytes > 0) {
    FrameHeader tmpl;
    tmpl.group = identity_.group;
    tmpl.src = identity_.rank;
    conn->enableLocalReads(cfg_.localReadBytes, tmpl, key);
  }
  bool accepting;
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    accepting = accepting_;
  }
  if (!accepting) {
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
  p.connectedOnce.store(true, std::memory_order_release);
  p.cv.notify_all();
  adopted_(*conn);
}

void Peers::lateGoodbye(Connection& conn) {
  FrameHeader h;
  h.group = identity_.group;
  h.src = identity_.rank;
  h.type = FrameType::kClose;
  conn.postClose(h);
  conn.start();
  Deadline limit = Deadline::after(std::chrono::milliseconds(500));
  while (!conn.sendFinished() && !limit.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  conn.close();
}

void Peers::connect(int peer, Deadline deadline, bool probing, bool* refusedAtConnect) {
  // A probe does not wait on the store for a peer that never published.
  SockAddr addr = addressOf(peer, probing ? deadline.earlier(Deadline::after(std::chrono::milliseconds(200)))
                                          : deadline);
  for (int i = 0; i < cfg_.nsocksPerPeer; ++i) {
    std::string what = strCat(self_, ": connection to rank ", peer, where(peer));
    Socket s;
    int err = 0;
    try {
      s = Socket::connect(addr, deadline, what, &err);
    } catch (const Error&) {
      // Only a refusal proves nothing listens there; an unreachable host or
      // a reset may be a router or a full backlog in front of a live peer.
      if (refusedAtConnect != nullptr) *refusedAtConnect = i == 0 && err == ECONNREFUSED;
      throw;
    }
    SessionKey key;
    try {
      Deadline hs = deadline.earlier(Deadline::after(cfg_.handshakeTimeout));
      key = handshakeAsConnector(s, identity_, static_cast<uint32_t>(peer), hs);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kRemote && refused_ && !probing) {
        refused_(peer, Error(e.kind(), strCat("connection to rank ", peer, where(peer), ": ", e.what())));
      }
      throwError(e.kind(), what, ": ", e.what());
    }
    adopt(std::move(s), peer, false, key);
  }
}

std::vector<std::shared_ptr<Connection>> Peers::connectionsTo(int peer, Deadline deadline) {
  Peer& p = at(peer);
  auto live = [&p] {  // under p.mu
    std::vector<std::shared_ptr<Connection>> out;
    for (auto& c : p.conns) {
      if (isUp(c)) out.push_back(c);
    }
    return out;
  };
  std::unique_lock<std::mutex> lock(p.mu);
  for (;;) {
    if (auto conns = live(); !conns.empty()) return conns;
    // A goodbye on any connection means the peer shut this group down, even
    // before that connection's reader has ended and marked it closed: a new
    // connection would only be refused.
    const bool saidGoodbye =
        p.closed || std::any_of(p.conns.begin(), p.conns.end(), [](const auto& c) { return c->peerClosed(); });
    if (saidGoodbye) {
      lock.unlock();  // where() takes p.mu
      throwError(ErrorKind::kRemote, self_, ": rank ", peer, where(peer),
                 " has shut down its communicator (destroy_process_group or exit) "
                 "but this rank still sends to it; did the ranks run different numbers of "
                 "operations?");
    }
    if (!p.connecting) break;
    if (deadline.isNever()) {
      p.cv.wait(lock);
    } else if (p.cv.wait_until(lock, deadline.time()) == std::cv_status::timeout) {
      lock.unlock();
      throwError(ErrorKind::kTimeout, self_, ": timed out waiting to connect to rank ", peer, where(peer));
    }
  }
  p.connecting = true;
  lock.unlock();
  try {
    connect(peer, deadline);
  } catch (...) {
    lock.lock();
    p.connecting = false;
    p.cv.notify_all();
    throw;
  }
  lock.lock();
  p.connecting = false;
  p.cv.notify_all();
  auto conns = live();
  lock.unlock();
  if (conns.empty()) {
    throwError(ErrorKind::kRemote, self_, ": the connection to rank ", peer, where(peer),
               " closed right after it was opened");
  }
  return conns;
}

Peers::Probe Peers::probe(int peer, Deadline deadline, std::string* why) {
  Peer& p = at(peer);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.conns.empty() || p.closed) return Probe::kConnected;  // its end is seen on them
    if (p.connecting) return Probe::kUnknown;  // another thread connects: it will see
    p.connecting = true;
  }
  bool refused = false;
  Probe out = Probe::kConnected;
  try {
    connect(peer, deadline, true, &refused);
  } catch (const Error& e) {
    *why = e.what();
    out = refused ? Probe::kRefused : Probe::kUnknown;
  } catch (...) {  // a thread or an allocation that failed: nothing proven
    out = Probe::kUnknown;
  }
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.connecting = false;
  }
  p.cv.notify_all();
  return out;
}

void Peers::postSend(int peer, const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl,
                     const void* data, Deadline deadline) {
  std::vector<std::shared_ptr<Connection>> conns;
  try {
    conns = connectionsTo(peer, deadline);
  } catch (const Error& e) {
    req->finish(&e);
    return;
  }
  const size_t bytes = req->bytes;
  const size_t frame = cfg_.frameBytes;
  const size_t frames = bytes == 0 ? 1 : (bytes + frame - 1) / frame;
  req->setFrames(static_cast<int>(frames), req);
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t rr = at(peer).next.fetch_add(frames);
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

void Peers::postControl(int peer, const FrameHeader& h, Deadline deadline) {
  auto conns = connectionsTo(peer, deadline);
  SendFrame f;
  encodeFrame(h, f.header);
  conns.front()->post(f);
}

bool Peers::connectionEnded(Connection& c) {
  Peer& p = at(c.peer());
  bool gone = true;
  {
    // The peer is gone once every connection here has ended, this one with
    // its goodbye, and goodbyes came on as many connections as the peer
    // said it closes (some may still be in this rank's listener).
    std::lock_guard<std::mutex> lock(p.mu);
    uint64_t announced = 0, said = 0;
    for (auto& x : p.conns) {
      if (x.get() != &c && !x->ended()) gone = false;
      uint64_t n = x->peerClosed() ? x->peerCloseCount() : 0;
      announced = std::max(announced, n);
      said += n > 0 ? 1 : 0;
    }
    gone = gone && c.peerClosed() && said >= announced;
    if (gone) p.closed = true;
  }
  p.cv.notify_all();
  return gone;
}

bool Peers::connected(int peer) const {
  Peer& p = at(peer);
  std::lock_guard<std::mutex> lock(p.mu);
  return std::any_of(p.conns.begin(), p.conns.end(), isUp);
}

void Peers::abortGroup(int peer, const FrameHeader& tmpl, const Error& e) {
  Peer& p = at(peer);
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    conns = p.conns;
  }
  for (auto& c : conns) c->postGroupAbort(tmpl, e);
}

void Peers::drop(int peer, const FrameHeader& tmpl) {
  Peer& p = at(peer);
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    conns.swap(p.conns);
    p.closed = true;
  }
  p.cv.notify_all();
  FrameHeader h = tmpl;
  h.type = FrameType::kClose;
  h.offset = static_cast<uint64_t>(
      std::count_if(conns.begin(), conns.end(), [](const auto& c) { return !c->ended(); }));
  for (auto& c : conns) c->postClose(h);
  // A dead peer's socket fails at once; a live one takes the goodbye in
  // well under this bound.
  Deadline limit = Deadline::after(std::chrono::milliseconds(500));
  for (auto& c : conns) {
    while (!c->sendFinished() && !c->ended() && !limit.expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  for (auto& c : conns) c->close();  // joins its threads (not under p.mu)
}

void Peers::interrupt() {
  for (auto& c : all()) c->interrupt();
}

void Peers::stopAccepting() {
  std::lock_guard<std::mutex> lock(stateMu_);
  accepting_ = false;
}

void Peers::closeAll(bool graceful, const FrameHeader& tmpl, Deadline grace, const Error* why) {
  auto conns = all();
  if (graceful) {
    FrameHeader h = tmpl;
    h.type = FrameType::kClose;
    // Each CLOSE says how many connections to that peer close: the peer may
    // not have adopted all of them yet (its listener hands a connection over
    // after the handshake's last byte has left), and must not take this rank
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
    if (why != nullptr) {
      for (auto& c : conns) c->postAbort(tmpl, *why);
    }
    // Let queued ABORT frames reach the peers before the sockets go.
    for (auto& c : conns) {
      while (!c->sendFinished() && !c->ended() && !grace.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  for (auto& c : conns) c->close();
}

std::vector<std::shared_ptr<Connection>> Peers::all() const {
  std::vector<std::shared_ptr<Connection>> out;
  for (const auto& p : peers_) {
    std::lock_guard<std::mutex> lock(p->mu);
    out.insert(out.end(), p->conns.begin(), p->conns.end());
  }
  return out;
}

size_t Peers::open() const {
  size_t n = 0;
  for (auto& c : all()) n += c->ended() ? 0 : 1;
  return n;
}

uint64_t Peers::framesOpened() const {
  uint64_t n = 0;
  for (auto& c : all()) n += c->framesOpened();
  return n;
}

uint64_t Peers::refFramesSent() const {
  uint64_t n = 0;
  for (auto& c : all()) n += c->refFramesSent();
  return n;
}

}  // namespace mccl
