#include "comm/communicator.h"

#include <algorithm>

#include "comm/job_secret.h"
#include "comm/op_context.h"
#include "util/check.h"
#include "util/logging.h"
#include "util/trace.h"

namespace mccl {

namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(10);
constexpr auto kCloseGrace = std::chrono::seconds(2);
// One dial of the abort relay: a live member on a LAN answers in
// milliseconds, a dead process's host refuses at once.
constexpr auto kRelayDial = std::chrono::milliseconds(2000);
// A receive from a peer never connected to: how long before it is dialled
// (a live sender has usually connected by then), and that dial's bound.
constexpr auto kProbeDelay = std::chrono::milliseconds(1000);
constexpr auto kProbeDial = std::chrono::milliseconds(2000);
// After a refusal: how long a connection the peer opened before it went
// may still sit in this rank's listener (it sent, then shut down).
constexpr auto kProbeSettle = std::chrono::milliseconds(1000);

// The probe's delay, spread by rank over a quarter more so that ranks that
// all wait for one late root do not dial it in the same millisecond.
std::chrono::milliseconds probeDelay(int rank) {
  return kProbeDelay + std::chrono::milliseconds((static_cast<int64_t>(rank) * 37) % (kProbeDelay.count() / 4));
}

Matching::Context matchingContext(const CommConfig& cfg, const std::string& label,
                                  std::function<std::string(int)> peerName) {
  Matching::Context m;
  m.rank = cfg.rank;
  m.size = cfg.size;
  m.group = label;
  m.peerName = std::move(peerName);
  return m;
}

std::vector<int> identityRanks(int n) {
  std::vector<int> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

// family rank -> group rank (-1 for ranks not in the group).
std::vector<int> inverse(const std::vector<int>& members, int familySize) {
  std::vector<int> g(static_cast<size_t>(familySize), -1);
  for (size_t i = 0; i < members.size(); ++i) g[static_cast<size_t>(members[i])] = static_cast<int>(i);
  return g;
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
      store_(std::move(store)),
      members_(identityRanks(config.size)),
      groupRanks_(identityRanks(config.size)),
      scratch_(64u << 20),
      matching_(matchingContext(cfg_, groupLabel_, [this](int r) { return peerName(r); }),
                cfg_.unexpectedBytes, scratch_),
      engine_(*this, matching_, [this](Clock::time_point d) { watchdog_.kick(d); }),
      watchdog_(*this, engine_, [this] { interruptConnections(); }),
      p2p_(*this, matching_, watchdog_,
           [this](int peer, const FrameHeader& h, Deadline d) {
             auto l = links();
             if (!l) throw poisonError();
             l->peers().postControl(members_[static_cast<size_t>(peer)], h, d);
           },
           static_cast<uint32_t>(config.rank)),
      connectedOnce_(new std::atomic<bool>[static_cast<size_t>(config.size)]()),
      probe_(config.size, probeDelay(config.rank), std::min<std::chrono::milliseconds>(config.timeout, kProbeDial),
             [this](int r) { return probeNeeded(r); }, [this](int r, Deadline d) { return probePeer(r, d); }) {}

Communicator::Communicator(const CommConfig& config, std::shared_ptr<Links> links, uint64_t groupId,
                           std::vector<int> members, const CostModel& model,
                           std::string interfaceName, SockAddr address)
    : cfg_(config),
      groupLabel_(strCat("group '", config.groupName, "'")),
      groupId_(groupId),
      members_(std::move(members)),
      groupRanks_(inverse(members_, static_cast<int>(links->identity().size))),
      model_(model),
      interfaceName_(std::move(interfaceName)),
      address_(std::move(address)),
      links_(std::move(links)),
      scratch_(64u << 20),
      matching_(matchingContext(cfg_, groupLabel_, [this](int r) { return peerName(r); }),
                cfg_.unexpectedBytes, scratch_),
      engine_(*this, matching_, [this](Clock::time_point d) { watchdog_.kick(d); }),
      watchdog_(*this, engine_, [this] { interruptConnections(); }),
      p2p_(*this, matching_, watchdog_,
           [this](int peer, const FrameHeader& h, Deadline d) {
             auto l = this->links();
             if (!l) throw poisonError();
             l->peers().postControl(members_[static_cast<size_t>(peer)], h, d);
           },
           static_cast<uint32_t>(members_[static_cast<size_t>(config.rank)])),
      connectedOnce_(new std::atomic<bool>[static_cast<size_t>(config.size)]()),
      probe_(config.size, probeDelay(config.rank), std::min<std::chrono::milliseconds>(config.timeout, kProbeDial),
             [this](int r) { return probeNeeded(r); }, [this](int r, Deadline d) { return probePeer(r, d); }) {}

void Communicator::bootstrap() {
  Interface itf = selectInterface(cfg_.socketIfname, cfg_.routeHost);
  interfaceName_ = itf.name;
  auto rendezvous = std::make_shared<Rendezvous>(store_, selfName());
  // Rank 0's model decides for the group; on one host (rank 0 on loopback,
  // so every rank reaches it over loopback) it prices shared links.
  CostModel mine = cfg_.model;
  mine.sharedHost = itf.loopback;
  mine.localReadBytes = mine.sharedHost ? cfg_.localReadBytes : 0;
  Rendezvous::Record boot = rendezvous->exchange(cfg_.rank, mine, cfg_.wireSettings(),
                                                 cfg_.jobSecret.has_value(), cfg_.timeout);
  const std::string mismatch = cfg_.wireMismatch(boot.settings);
  MCCL_USAGE_CHECK(mismatch.empty(), selfName(), ": ", mismatch);
  MCCL_USAGE_CHECK(boot.keyed == cfg_.jobSecret.has_value(), selfName(), ": ",
                   boot.keyed ? "rank 0 has a job secret (MCCL_SECRET_FILE or MCCL_SECRET) and this "
                                "rank has none"
                              : "this rank has a job secret (MCCL_SECRET_FILE or MCCL_SECRET) and "
                                "rank 0 has none",
                   "; set the same one on every rank");
  groupId_ = boot.group;
  model_ = boot.model;
  Identity identity;
  identity.rank = static_cast<uint32_t>(cfg_.rank);
  identity.size = static_cast<uint32_t>(cfg_.size);
  identity.group = boot.group;
  identity.secret = cfg_.jobSecret ? groupSecret(*cfg_.jobSecret, boot.group, boot.salt) : boot.salt;
  auto links = std::make_shared<Links>(cfg_, identity, std::move(rendezvous), selfName());
  links->setOwner(this, groupId_);
  {
    std::lock_guard<std::mutex> lock(linksMu_);
    links_ = links;
  }
  links->listen(itf.addr);
  address_ = links->address();
  MCCL_LOG(kInfo, selfName(), ": listening on ", address_.toString(), " (", itf.name, ")");
  startThreads();
}

void Communicator::startThreads() {
  engine_.start();
  watchdog_.start();
}

Communicator::~Communicator() { shutdown(); }

std::shared_ptr<Links> Communicator::links() const {
  std::lock_guard<std::mutex> lock(linksMu_);
  return links_;
}

const SockAddr& Communicator::address() const { return address_; }

std::string Communicator::selfName() const {
  return strCat("mccl rank ", cfg_.rank, "/", cfg_.size, " in ", groupLabel_);
}

std::string Communicator::peerName(int rank) const {
  if (rank < 0 || rank >= cfg_.size) return strCat("rank ", rank);
  auto l = links();
  return strCat("rank ", rank, l ? l->peers().where(members_[static_cast<size_t>(rank)]) : "");
}

std::string Communicator::connectingTo() const {
  auto l = links();
  if (!l) return "";
  std::string out;
  for (auto [family, known] : l->peers().connecting()) {
    const int g = groupRank(static_cast<uint32_t>(family));
    if (g < 0) continue;  // a peer of the family, not of this group
    out += strCat(out.empty() ? "" : " and ",
                  known ? strCat("connection to ", peerName(g))
                        : strCat("address of rank ", g, ", which is not in the store (that rank never joined "
                                 "this group, or it died before it did)"));
  }
  return out;
}

int Communicator::groupRank(uint32_t wire) const {
  return wire < groupRanks_.size() ? groupRanks_[wire] : -1;
}

FrameHeader Communicator::toGroup(const FrameHeader& h) const {
  const int g = groupRank(h.src);
  if (g < 0) {
    throwError(ErrorKind::kRemote, selfName(), ": frame from rank ", h.src,
               " of the group these links were made for, which is not in this group");
  }
  FrameHeader x = h;
  x.src = static_cast<uint32_t>(g);
  return x;
}

FrameHeader Communicator::controlTemplate() const {
  FrameHeader h;
  h.group = groupId_;
  h.src = wireRank();
  return h;
}

void Communicator::checkLive(const char* what) const {
  if (retired_.load()) {
    throwError(ErrorKind::kUsage, selfName(), ": ", what, " on a group that shrink_group replaced by ",
               successor_, "; use the group it returned");
  }
}

Error Communicator::poisonError() const {
  std::lock_guard<std::mutex> lock(poisonMu_);
  MCCL_CHECK(poison_ != nullptr);
  return *poison_;
}

bool Communicator::setPoison(const Error& e) {
  std::lock_guard<std::mutex> lock(poisonMu_);
  if (poison_) return false;
  poison_ = std::make_unique<Error>(e);
  poisoned_.store(true, std::memory_order_release);
  return true;
}

void Communicator::failPending(const Error& e) {
  if (e.kind() != ErrorKind::kAborted) MCCL_LOG(kWarn, e.what());
  matching_.failAll(e);
  p2p_.failAll(e);
  // Running ops fail now if they wait, else at their next wait.
  for (auto& op : engine_.active()) op->fail(e);
  watchdog_.kick();  // failed ops now retire; make it watch them
}

void Communicator::failLocally(const Error& e) {
  if (setPoison(e)) failPending(e);
}

void Communicator::poison(const Error& e) {
  if (poisoned() || !setPoison(e)) return;
  // Tell every member, so the whole group fails fast. The connections stay
  // up: a shrunk group may take them over. The relay starts before the
  // waiters wake, so that one which then shuts the group down waits for it.
  auto l = retired_.load() ? nullptr : links();
  if (l) relayAbort();
  failPending(e);
  if (l) {
    for (size_t r = 0; r < members_.size(); ++r) {
      if (static_cast<int>(r) != cfg_.rank) l->peers().abortGroup(members_[r], controlTemplate(), e);
    }
  }
}

void Communicator::relayAbort() {
  std::vector<int> order;
  for (int i = 1; i < cfg_.size; ++i) order.push_back((cfg_.rank + i) % cfg_.size);
  const auto dial = std::min<std::chrono::milliseconds>(cfg_.timeout, kRelayDial);
  relay_.start(std::move(order), dial, [this](int r, Deadline d) { return reachForAbort(r, d); });
}

bool Communicator::reachForAbort(int r, Deadline deadline) {
  auto l = links();
  if (!l || retired_.load()) return true;  // the links serve another group now: stop
  if (isFailedPeer(r)) return false;
  const int peer = members_[static_cast<size_t>(r)];
  if (l->peers().connected(peer)) return true;  // poison() told it on that connection
  // A new connection carries the ABORT (adopted()); throws when the member
  // is dead or has shut down, and the relay tries the next.
  l->peers().connectionsTo(peer, deadline);
  return true;
}

void Communicator::interruptConnections() {
  if (auto l = links()) l->peers().interrupt();
}

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
  // A failed group's ABORT reaches the members no connection tells
  // (bounded), before the connections start to close.
  probe_.finish();  // first: a probe may still poison, and that is relayed
  relay_.finish(Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseGrace)));
  auto l = links();
  if (l) l->peers().stopAccepting();
  engine_.stop();
  // Ops still running (after a failure) retire once their transfers have
  // failed; make sure they do.
  engine_.retire([this] { interruptConnections(); });
  watchdog_.stop();
  if (l) {
    Deadline grace = Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseGrace));
    std::unique_ptr<Error> why;
    if (poisoned()) why = std::make_unique<Error>(poisonError());
    l->close(graceful && !why, controlTemplate(), grace, why.get());
  }
  const Error down(ErrorKind::kAborted, strCat(selfName(), ": the communicator was shut down"));
  matching_.failAll(down);
  p2p_.failAll(down);  // large sends still waiting for a clear-to-send
  stopped_ = true;
}

std::shared_ptr<Communicator> Communicator::shrink(const std::vector<int>& excluded, bool abortPending,
                                                   const std::string& groupName) {
  std::lock_guard<std::mutex> life(lifeMu_);
  const std::string op = "shrink_group";
  MCCL_USAGE_CHECK(!retired_.load(), selfName(), ": ", op, " on a group that was shrunk already into ",
                   successor_);
  MCCL_USAGE_CHECK(!stopped_, selfName(), ": ", op, " on a group that was shut down");
  std::vector<bool> out(static_cast<size_t>(cfg_.size), false);
  for (int r : excluded) {
    MCCL_USAGE_CHECK(r >= 0 && r < cfg_.size, selfName(), ": ", op, ": rank ", r,
                     " is outside the group of ", cfg_.size);
    MCCL_USAGE_CHECK(!out[static_cast<size_t>(r)], selfName(), ": ", op, ": rank ", r, " is excluded twice");
    MCCL_USAGE_CHECK(r != cfg_.rank, selfName(), ": ", op, ": this rank is among the excluded; only "
                     "the ranks that stay call shrink_group");
    out[static_cast<size_t>(r)] = true;
  }
  MCCL_USAGE_CHECK(!excluded.empty(), selfName(), ": ", op, ": no rank to exclude");
  auto links = this->links();
  MCCL_CHECK(links != nullptr);
  if (abortPending) {
    failLocally(Error(ErrorKind::kAborted,
                      strCat(selfName(), ": aborted by shrink_group(SHRINK_ABORT) while pending")));
  } else if (!engine_.drain(cfg_.timeout)) {
    throwError(ErrorKind::kUsage, selfName(), ": ", op, ": operations are still pending after ",
               cfg_.timeout.count() / 1000.0, " s; wait for them, or pass SHRINK_ABORT");
  }
  // The ABORT of a failure reaches the members no connection tells before
  // the links change hands (bounded).
  probe_.finish();
  relay_.finish(Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseGrace)));
  // From here the links' events are the successor's business.
  retired_.store(true);
  engine_.stop();
  engine_.retire([this] { interruptConnections(); });
  watchdog_.stop();

  std::vector<int> members;
  int newRank = -1;
  for (int r = 0; r < cfg_.size; ++r) {
    if (out[static_cast<size_t>(r)]) continue;
    if (r == cfg_.rank) newRank = static_cast<int>(members.size());
    members.push_back(members_[static_cast<size_t>(r)]);
  }
  CommConfig c = cfg_;
  c.rank = newRank;
  c.size = static_cast<int>(members.size());
  c.groupName = groupName;
  const uint64_t id = successorGroupId(groupId_);
  std::shared_ptr<Communicator> child(
      new Communicator(c, links, id, std::move(members), model_, interfaceName_, address_));
  successor_ = strCat("group '", groupName, "' (", c.size, " ranks)");
  const Error retired(ErrorKind::kAborted, strCat(selfName(), ": retired by ", op, " into ", successor_));
  matching_.failAll(retired);
  p2p_.failAll(retired);  // a clear-to-send for this group would now be dropped
  for (int r = 0; r < cfg_.size; ++r) {
    if (out[static_cast<size_t>(r)]) links->peers().drop(members_[static_cast<size_t>(r)], controlTemplate());
  }
  links->handover(groupId_, child.get(), id);
  {
    std::lock_guard<std::mutex> lock(linksMu_);
    links_.reset();
  }
  stopped_ = true;
  child->startThreads();
  MCCL_LOG(kInfo, selfName(), ": shrunk into ", child->selfName(), " (", excluded.size(), " excluded)");
  return child;
}

void Communicator::learnAddresses() {
  auto l = links();
  if (!l) throwError(ErrorKind::kUsage, selfName(), ": learnAddresses on a group that shrank");
  l->peers().learnAddresses(Deadline::after(cfg_.timeout));
}

size_t Communicator::numConnections() const {
  auto l = links();
  return l ? l->peers().open() : 0;
}

uint64_t Communicator::sealedFramesReceived() const {
  auto l = links();
  return l ? l->peers().framesOpened() : 0;
}

uint64_t Communicator::refFramesSent() const {
  auto l = links();
  return l ? l->peers().refFramesSent() : 0;
}

size_t Communicator::rejectedConnections() const {
  auto l = links();
  return l ? l->rejected() : 0;
}

// --------------------------------------------------------------------- ops

std::shared_ptr<Work> Communicator::submit(const OpSignature& sig, std::chrono::milliseconds timeout,
                                           Body body, std::string description, bool small) {
  checkLive(description.c_str());
  return engine_.submit(sig, timeout, std::move(body), std::move(description), small);
}

void Communicator::opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error) {
  engine_.opCompleted(seq, std::move(work), error);
}

void Communicator::postSend(const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl,
                            const void* data, Deadline deadline) {
  auto l = links();
  if (poisoned() || !l) {
    Error e = poisoned() ? poisonError()
                         : Error(ErrorKind::kAborted, strCat(selfName(), ": the group was shrunk"));
    req->finish(&e);
    return;
  }
  FrameHeader t = tmpl;
  t.src = wireRank();
  l->peers().postSend(members_[static_cast<size_t>(req->peer)], req, t, data, deadline);
}

void Communicator::postRecv(const std::shared_ptr<RecvRequest>& req) {
  matching_.post(req);
  expectFrom(static_cast<int>(req->key.src));
}

void Communicator::expectFrom(int peer) {
  if (peer < 0 || peer >= cfg_.size || peer == cfg_.rank) return;
  auto& seen = connectedOnce_[static_cast<size_t>(peer)];
  if (seen.load(std::memory_order_relaxed)) return;  // the usual case: one load
  auto l = links();
  if (!l) return;
  if (l->peers().everConnected(members_[static_cast<size_t>(peer)])) {
    seen.store(true, std::memory_order_relaxed);
  } else {
    probe_.expect(peer);
  }
}

bool Communicator::probeNeeded(int peer) const {
  auto l = links();
  return l && !retired_.load() && !poisoned() && !l->peers().everConnected(members_[static_cast<size_t>(peer)]);
}

bool Communicator::probePeer(int peer, Deadline deadline) {
  auto l = links();
  if (!l) return true;
  const int family = members_[static_cast<size_t>(peer)];
  std::string why;
  // Only a refused connect proves the peer gone. A dial that timed out (a
  // slow host), a dropped handshake (a live listener in a burst, or one
  // that was closing as this rank connected: the kernel queued the
  // connection, then reset it) or a local error prove nothing: the probe is
  // dialled again later (PeerProbe), and the op's timeout bounds it all.
  switch (l->peers().probe(family, deadline, &why)) {
    case Peers::Probe::kConnected: return true;
    case Peers::Probe::kUnknown: return false;
    case Peers::Probe::kRefused: break;
  }
  // A peer that sent and then shut down may have left its connection in
  // this rank's listener: once adopted, its goodbye ends only what still
  // waits for it (peerGone), as any clean close does.
  Deadline settle = Deadline::after(kProbeSettle);
  while (!settle.expired()) {
    if (l->peers().everConnected(family) || poisoned() || retired_.load() || probe_.stopping()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  noteFailedPeer(peer);
  poison(Error(ErrorKind::kRemote, strCat(selfName(), ": ", peerName(peer),
                                          " cannot be reached while this rank waits for its data: ", why,
                                          "; its process has died or left the group")));
  return true;
}

std::shared_ptr<Work> Communicator::send(int peer, uint32_t tag, const void* data, size_t bytes,
                                         DataType dtype, uint64_t count, std::chrono::milliseconds timeout) {
  checkLive("send");
  return p2p_.send(peer, tag, data, bytes, dtype, count, timeout);
}

std::shared_ptr<Work> Communicator::recv(int peer, uint32_t tag, void* data, size_t bytes,
                                         DataType dtype, uint64_t count, std::chrono::milliseconds timeout) {
  checkLive("recv");
  auto w = p2p_.recv(peer, tag, data, bytes, dtype, count, timeout);
  if (peer != kAnySource) expectFrom(peer);
  return w;
}

// --------------------------------------------------------------- LinkOwner

void* Communicator::payloadDest(Connection&, const FrameHeader& h) {
  // A failed group's frames (a peer's last sends before it learnt) are read
  // and dropped: the connection may serve a shrunk group next.
  if (poisoned() || retired_.load()) return discardBuffer(h.length);
  const FrameHeader g = toGroup(h);
  if (!g.isP2P()) trace::record(trace::Ev::kFrameRead, static_cast<int>(g.src), g.group, g.seq, g.slot);
  return matching_.incoming(g);
}

void Communicator::payloadDone(Connection&, const FrameHeader& h, void* dst) {
  matching_.incomingDone(toGroup(h), dst, true);
}

void Communicator::payloadAborted(Connection&, const FrameHeader& h, void* dst) {
  matching_.incomingDone(toGroup(h), dst, false);
}

void Communicator::control(Connection&, const FrameHeader& h, const std::string& text) {
  const FrameHeader g = toGroup(h);
  const int peer = static_cast<int>(g.src);
  switch (h.type) {
    case FrameType::kAbort: {
      // Keep the peer's error kind (a mismatch stays a usage error), except
      // that a peer's own abort() is, from here, a remote failure.
      ErrorKind kind = ErrorKind::kRemote;
      if (h.slot <= static_cast<uint32_t>(ErrorKind::kInternal)) kind = static_cast<ErrorKind>(h.slot);
      if (kind == ErrorKind::kAborted) kind = ErrorKind::kRemote;
      poison(Error(kind, strCat(selfName(), ": ", peerName(peer), " failed and aborted the group: ", text)));
      return;
    }
    case FrameType::kRts:
      p2p_.onRts(peer, g);
      return;
    case FrameType::kCts:
      p2p_.onCts(peer, g);
      return;
    default:
      throwError(ErrorKind::kRemote, selfName(), ": unexpected ", h.describe());
  }
}

void Communicator::linkFailed(int peer, const Error& err) {
  const int g = groupRank(static_cast<uint32_t>(peer));
  if (retired_.load() || g < 0) return;  // not this group's
  noteFailedPeer(g);
  // The link names the peer by its rank in the group that made the links.
  const std::string as = g == peer ? std::string() : strCat(" (rank ", g, " of this group)");
  poison(Error(err.kind(), strCat(selfName(), ": ", err.what(), as)));
  relay_.lost(g);  // if the relay counted it as told, it goes on past it
}

void Communicator::noteFailedPeer(int g) {
  std::lock_guard<std::mutex> lock(poisonMu_);
  if (std::find(failedPeers_.begin(), failedPeers_.end(), g) == failedPeers_.end()) failedPeers_.push_back(g);
}

bool Communicator::isFailedPeer(int g) const {
  std::lock_guard<std::mutex> lock(poisonMu_);
  return std::find(failedPeers_.begin(), failedPeers_.end(), g) != failedPeers_.end();
}

std::vector<int> Communicator::failedPeers() const {
  std::lock_guard<std::mutex> lock(poisonMu_);
  return failedPeers_;
}

void Communicator::peerGone(int peer) {
  const int g = groupRank(static_cast<uint32_t>(peer));
  if (retired_.load() || g < 0) return;
  relay_.lost(g);
  // Everything the peer sent has arrived: whatever else we wait for from it
  // will never come.
  matching_.sourceClosed(static_cast<uint32_t>(g),
                         Error(ErrorKind::kRemote,
                               strCat(selfName(), ": ", peerName(g),
                                      " has shut down its process group (destroy_process_group "
                                      "or exit) while this rank still expects data from it; "
                                      "did the ranks run different numbers of operations?")));
}

void Communicator::adopted(Connection& c) {
  if (poisoned()) c.postGroupAbort(controlTemplate(), poisonError());
}

}  // namespace mccl
