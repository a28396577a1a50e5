#include "comm/links.h"

#include <utility>
#include <vector>

#include "util/check.h"
#include "util/logging.h"

namespace mccl {

namespace {
thread_local std::vector<uint8_t> tDiscard;
}  // namespace

void* discardBuffer(size_t bytes) {
  if (tDiscard.size() < std::max<size_t>(bytes, 1)) tDiscard.resize(std::max<size_t>(bytes, 1));
  return tDiscard.data();
}

bool isDiscarded(const void* dst) { return dst != nullptr && dst == tDiscard.data(); }

uint64_t successorGroupId(uint64_t id) {
  // splitmix64 of the parent's id: a fresh 64-bit id every survivor derives.
  uint64_t z = id + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Links::Links(const CommConfig& cfg, const Identity& identity, std::shared_ptr<Rendezvous> rendezvous,
             std::string selfName)
    : cfg_(cfg),
      identity_(identity),
      rendezvous_(std::move(rendezvous)),
      self_(std::move(selfName)),
      peers_(cfg_, identity_, *this, *rendezvous_, self_,
             [this](Connection& c) {
               if (LinkOwner* o = acquireCurrent()) {
                 o->adopted(c);
                 done(o);
               }
             },
             [this](int peer, const Error& err) {
               if (LinkOwner* o = acquireCurrent()) {
                 o->linkFailed(peer, err);
                 done(o);
               }
             }) {}

Links::~Links() {
  if (listener_) listener_->stop();
}

void Links::listen(const SockAddr& addr) {
  listener_ = std::make_unique<Listener>(
      addr, cfg_.portRange, identity_, cfg_.handshakeTimeout,
      [this](Socket sock, uint32_t peer, uint16_t port, const SessionKey& key) {
        if (cfg_.adoptDelayForTesting.count() > 0) std::this_thread::sleep_for(cfg_.adoptDelayForTesting);
        peers_.adopt(std::move(sock), static_cast<int>(peer), true, key, port);
      },
      self_ + ": ");
  identity_.listenPort = static_cast<uint16_t>(listener_->address().port());
  rendezvous_->publishAddress(cfg_.rank, listener_->address());
}

void Links::setOwner(LinkOwner* owner, uint64_t group) {
  std::lock_guard<std::mutex> lock(mu_);
  owner_ = owner;
  group_ = group;
}

void Links::handover(uint64_t from, LinkOwner* to, uint64_t toGroup) {
  std::unique_lock<std::mutex> lock(mu_);
  MCCL_CHECK_EQ(from, group_);
  old_ = owner_;
  oldBusy_ = busy_;
  owner_ = to;
  busy_ = 0;
  group_ = toGroup;
  retired_.insert(from);
  cv_.notify_all();  // frames that waited for the successor go on
  // The old owner may be destroyed once nothing runs in it or reads into
  // its memory (its ops have failed or finished: payloads end promptly).
  if (!cv_.wait_for(lock, cfg_.timeout, [&] { return oldBusy_ == 0; })) {
    MCCL_LOG(kWarn, self_, ": a connection still reads into the group that shrink_group retired after ",
             cfg_.timeout.count() / 1000.0, " s; closing the connections");
    lock.unlock();
    peers_.interrupt();
    lock.lock();
    cv_.wait(lock, [&] { return oldBusy_ == 0; });
  }
  old_ = nullptr;
}

LinkOwner* Links::acquire(uint64_t group, bool wait, const Connection& c) {
  std::unique_lock<std::mutex> lock(mu_);
  Deadline limit = Deadline::after(cfg_.timeout);
  for (;;) {
    if (group == group_ && owner_ != nullptr) {
      ++busy_;
      return owner_;
    }
    // Closing: a group this rank will not make, or a retired one (drop).
    if (retired_.count(group) != 0 || closing_) return nullptr;
    if (group != successorGroupId(group_) || !wait) break;
    // A peer has shrunk this group already and sends on the new one: hold
    // this connection until this rank shrinks too.
    if (cv_.wait_until(lock, limit.time()) == std::cv_status::timeout && group != group_) {
      throwError(ErrorKind::kTimeout, self_, ": ", c.name(), ": the peer sent frames for the group "
                 "that shrink_group makes of this one, but this rank did not call shrink_group within ",
                 cfg_.timeout.count() / 1000.0, " s");
    }
  }
  throwError(ErrorKind::kRemote, self_, ": ", c.name(), ": frame of unknown group ", group,
             " (this rank's group is ", group_, ")");
}

LinkOwner* Links::acquireCurrent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (owner_ != nullptr) ++busy_;
  return owner_;
}

void Links::done(LinkOwner* owner) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (owner == owner_) {
      --busy_;
    } else if (owner == old_) {
      --oldBusy_;
    }
  }
  cv_.notify_all();
}

namespace {
// The owner a payload is being read for, between payloadDest and
// payloadDone on this receive thread.
thread_local LinkOwner* tReading = nullptr;
}  // namespace

void* Links::payloadDest(Connection& c, const FrameHeader& h) {
  LinkOwner* owner = acquire(h.group, true, c);
  if (owner == nullptr) return discardBuffer(h.length);
  void* dst;
  try {
    dst = owner->payloadDest(c, h);
  } catch (...) {
    done(owner);
    throw;
  }
  if (isDiscarded(dst)) {
    done(owner);
  } else {
    tReading = owner;  // busy until payloadDone / payloadAborted
  }
  return dst;
}

void Links::payloadDone(Connection& c, const FrameHeader& h, void* dst) {
  LinkOwner* owner = std::exchange(tReading, nullptr);
  if (isDiscarded(dst) || owner == nullptr) return;
  owner->payloadDone(c, h, dst);
  done(owner);
}

void Links::payloadAborted(Connection& c, const FrameHeader& h, void* dst) {
  LinkOwner* owner = std::exchange(tReading, nullptr);
  if (isDiscarded(dst) || owner == nullptr) return;
  owner->payloadAborted(c, h, dst);
  done(owner);
}

void Links::control(Connection& c, const FrameHeader& h, const std::string& text) {
  if (h.type == FrameType::kClose) {
    // The peer process is done with these links: answer in kind so its
    // socket sees our EOF promptly; sends to it are refused from now on.
    FrameHeader mine;
    mine.type = FrameType::kClose;
    mine.group = h.group;
    mine.src = identity_.rank;
    c.postClose(mine);
    return;
  }
  LinkOwner* owner = acquire(h.group, true, c);
  if (owner == nullptr) return;  // a retired group's late ABORT, RTS or CTS
  try {
    owner->control(c, h, text);
  } catch (...) {
    done(owner);
    throw;
  }
  done(owner);
}

void Links::connectionEnded(Connection& c, const Error* err) {
  const bool gone = err == nullptr && peers_.connectionEnded(c);
  if (err == nullptr && !gone) return;
  LinkOwner* owner = acquireCurrent();
  if (owner == nullptr) return;
  if (err != nullptr) {
    owner->linkFailed(c.peer(), *err);
  } else {
    owner->peerGone(c.peer());
  }
  done(owner);
}

void Links::close(bool graceful, const FrameHeader& tmpl, Deadline grace, const Error* why) {
  {
    // A receive thread held for the successor group (a peer shrank, this
    // rank shuts down instead) lets go, so closing can join it.
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  peers_.stopAccepting();
  if (listener_) listener_->stop();
  peers_.closeAll(graceful, tmpl, grace, why);
}

}  // namespace mccl
