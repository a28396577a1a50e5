#include "comm/p2p.h"

#include "util/check.h"

namespace mccl {

std::string peerRefusal(int size, int self, int64_t peer, const char* what) {
  if (peer < 0 || peer >= size) return strCat(what, " rank ", peer, " is outside the group of ", size, " ranks");
  if (peer == self) return strCat(what, " rank ", peer, " is this rank (to itself is not supported)");
  return {};
}

PointToPoint::PointToPoint(OpHost& host, Matching& matching, Watchdog& watchdog,
                           PostControl postControl, uint32_t wireRank)
    : host_(host),
      matching_(matching),
      watchdog_(watchdog),
      postControl_(std::move(postControl)),
      wireRank_(wireRank) {
  // An announced message that a waiting any-source receive took when it
  // became next in order (matching.h) gets its clear-to-send here.
  matching_.setCtsDue([this](uint32_t src, uint64_t seq, uint32_t tag) { sendCts(static_cast<int>(src), seq, tag); });
}

FrameHeader PointToPoint::header(uint64_t seq, uint32_t tag) const {
  FrameHeader h;
  h.flags = kFlagP2P;
  h.group = host_.groupId();
  h.seq = seq;
  h.slot = tag;
  h.src = wireRank_;
  h.op = OpKind::kSendRecv;
  return h;
}

void PointToPoint::done(const std::shared_ptr<Work>& work, Transfer& t) {
  if (t.error() != nullptr) {
    const Error& e = *t.error();
    host_.poison(e);
    work->complete(std::make_exception_ptr(Error(e.kind(), strCat(work->description(), " failed: ", e.what()))));
  } else {
    if (t.peerRank() >= 0) work->setSourceRank(t.peerRank());
    work->complete(nullptr);
  }
}

std::shared_ptr<Work> PointToPoint::send(int peer, uint32_t tag, const void* data, size_t bytes,
                                         DataType dtype, uint64_t count, std::chrono::milliseconds timeout) {
  const int size = host_.size();
  const std::string why = peerRefusal(size, host_.rank(), peer, "destination");
  MCCL_USAGE_CHECK(why.empty(), host_.selfName(), ": send: ", why);
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = sendCounter_[{peer, tag}]++;
  }
  auto work = std::make_shared<Work>(strCat(host_.selfName(), ": send of ", count, " x ",
                                            dtypeName(dtype), " with tag ", tag, " to ",
                                            host_.peerName(peer)));
  if (host_.poisoned()) {
    Error p = host_.poisonError();
    work->complete(std::make_exception_ptr(
        Error(p.kind(), strCat(work->description(), " failed: ", p.what()))));
    return work;
  }
  auto req = std::make_shared<SendRequest>(peer, MsgKey{1, seq, tag, static_cast<uint32_t>(host_.rank())},
                                           OpKind::kSendRecv, bytes);
  req->onDone = [this, work](Transfer& t) { done(work, t); };
  FrameHeader h = header(seq, tag);
  h.dtype = dtype;
  h.count = count;
  Deadline deadline = Deadline::after(timeout.count() > 0 ? timeout : host_.config().timeout);
  watchdog_.watch(deadline, req, timeout);
  if (bytes <= host_.config().p2pEagerBytes) {
    host_.postSend(req, h, data, deadline);
    return work;
  }
  // Rendezvous: announce the message; the data follows the receiver's
  // clear-to-send, straight into its posted buffer.
  {
    // Under the lock that failAll takes: a send announced after the group
    // failed (the poison check above raced with it) fails here, as failAll
    // would have failed it.
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_) {
      const Error e = *failed_;
      lock.unlock();
      req->finish(&e);
      return work;
    }
    announced_.insert_or_assign({peer, seq, tag}, PendingSend{req, h, data, deadline});
  }
  FrameHeader rts = h;
  rts.type = FrameType::kRts;
  rts.msgBytes = bytes;
  control(peer, rts);
  return work;
}

std::shared_ptr<Work> PointToPoint::recv(int peer, uint32_t tag, void* data, size_t bytes,
                                         DataType dtype, uint64_t count, std::chrono::milliseconds timeout) {
  const int size = host_.size();
  const std::string why = peer == kAnySource ? std::string() : peerRefusal(size, host_.rank(), peer, "source");
  MCCL_USAGE_CHECK(why.empty(), host_.selfName(), ": receive: ", why);
  OpSignature sig;
  sig.op = OpKind::kSendRecv;
  sig.dtype = dtype;
  sig.count = count;
  auto work = std::make_shared<Work>(strCat(
      host_.selfName(), ": receive of ", count, " x ", dtypeName(dtype), " with tag ", tag, " from ",
      peer == kAnySource ? std::string("any rank") : host_.peerName(peer)));
  auto req = std::make_shared<RecvRequest>(
      MsgKey{1, 0, tag, static_cast<uint32_t>(peer == kAnySource ? 0 : peer)}, data, bytes, sig);
  req->onDone = [this, work](Transfer& t) { done(work, t); };
  watchdog_.watch(Deadline::after(timeout.count() > 0 ? timeout : host_.config().timeout), req, timeout);
  bool cts = peer == kAnySource ? matching_.postAnySource(req) : matching_.post(req);
  if (cts) sendCts(static_cast<int>(req->key.src), req->key.seq, req->key.slot);
  return work;
}

void PointToPoint::control(int peer, const FrameHeader& h) {
  try {
    postControl_(peer, h, Deadline::after(host_.config().timeout));
  } catch (const Error& e) {
    host_.poison(e);
  }
}

void PointToPoint::sendCts(int peer, uint64_t seq, uint32_t tag) {
  FrameHeader h = header(seq, tag);
  h.type = FrameType::kCts;
  control(peer, h);
}

void PointToPoint::onRts(int peer, const FrameHeader& h) {
  if (matching_.incomingRts(h)) sendCts(peer, h.seq, h.slot);
}

void PointToPoint::onCts(int peer, const FrameHeader& h) {
  PendingSend p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = announced_.find({peer, h.seq, h.slot});
    if (it == announced_.end()) {
      if (host_.poisoned()) return;  // the send already failed
      throwError(ErrorKind::kRemote, host_.selfName(), ": ", host_.peerName(peer),
                 " sent a clear-to-send for send #", h.seq, " with tag ", h.slot,
                 ", which this rank never announced");
    }
    p = std::move(it->second);
    announced_.erase(it);
  }
  host_.postSend(p.req, p.tmpl, p.data, p.deadline);
}

void PointToPoint::failAll(const Error& e) {
  std::map<std::tuple<int, uint64_t, uint32_t>, PendingSend> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_) failed_ = std::make_unique<Error>(e);
    waiting.swap(announced_);
  }
  for (auto& [key, p] : waiting) p.req->finish(&e);
}

}  // namespace mccl
