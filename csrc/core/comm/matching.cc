#include "comm/matching.h"

#include <cstring>

#include "util/check.h"
#include "util/logging.h"

namespace mccl {

namespace {
constexpr auto kBudgetWait = std::chrono::milliseconds(200);
}  // namespace

Matching::Matching(Context ctx, size_t budgetBytes, ScratchPool& pool)
    : ctx_(std::move(ctx)), budget_(budgetBytes), pool_(pool) {}

Matching::~Matching() = default;

size_t Matching::unexpectedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unexpectedBytes_;
}

std::string Matching::mismatchText(uint64_t seq, const OpSignature& mine,
                                   const FrameHeader& theirs) const {
  return strCat("ranks disagree on collective #", seq, " of ", ctx_.group, ": this rank (",
                ctx_.rank, ") called ", mine.describe(), " but ", ctx_.peerName(theirs.src),
                " called ", OpSignature::describeFrame(theirs), "; the ", mine.difference(theirs));
}

void Matching::checkCollective(const FrameHeader& h) {
  if (h.seq >= nextToStart_) return;  // an op this rank has not started yet
  auto it = active_.find(h.seq);
  if (it == active_.end()) {
    throwError(ErrorKind::kUsage, "ranks disagree on the sequence of collectives in ", ctx_.group,
               ": ", ctx_.peerName(h.src), " sent ", OpSignature::describeFrame(h), " #", h.seq,
               " but this rank (", ctx_.rank, ") has already completed its collective #", h.seq);
  }
  if (!it->second.matches(h)) throwError(ErrorKind::kUsage, mismatchText(h.seq, it->second, h));
}

void Matching::validatePosted(const RecvRequest& req, const FrameHeader& h) const {
  if (!h.isP2P()) {
    if (h.msgBytes != req.bytes) {
      throwError(ErrorKind::kUsage, ctx_.peerName(h.src), " sent ", h.msgBytes, " bytes for ",
                 OpSignature::describeFrame(h), " #", h.seq, " slot ", h.slot,
                 " but this rank (", ctx_.rank, ") expected ", req.bytes,
                 " bytes; ranks disagree on the collective's sizes");
    }
    return;
  }
  if (h.msgBytes != req.bytes || h.dtype != req.sig.dtype) {
    throwError(ErrorKind::kUsage, "send/recv mismatch in ", ctx_.group, ": ",
               ctx_.peerName(h.src), " sent ", h.count, " x ", dtypeName(h.dtype), " (",
               h.msgBytes, " bytes) with tag ", h.slot, " but this rank (", ctx_.rank,
               ") posted a receive of ", req.sig.count, " x ", dtypeName(req.sig.dtype), " (",
               req.bytes, " bytes)");
  }
}

bool Matching::bindAnySource(const FrameHeader& h) {
  for (auto it = anySource_.begin(); it != anySource_.end(); ++it) {
    auto& req = *it;
    if (req->key.slot != h.slot) continue;
    uint64_t& next = recvCounter_[{h.src, h.slot}];
    if (h.seq != next) return false;  // an earlier message of this pair is still due
    ++next;
    req->key.src = h.src;
    req->key.seq = h.seq;
    req->matched = true;
    posted_[req->key] = req;
    anySource_.erase(it);
    return true;
  }
  return false;
}

void Matching::rematchAnySource(uint32_t src, uint32_t slot, DoneList* done, std::vector<MsgKey>* cts) {
  for (;;) {
    auto waiting = std::find_if(anySource_.begin(), anySource_.end(),
                                [slot](const auto& r) { return r->key.slot == slot; });
    if (waiting == anySource_.end()) return;
    uint64_t& next = recvCounter_[{src, slot}];
    auto u = unexpected_.find(MsgKey{1, next, slot, src});
    if (u == unexpected_.end()) return;
    const auto req = *waiting;
    anySource_.erase(waiting);
    try {
      validatePosted(*req, u->second.first);
    } catch (const Error& e) {
      // As at the call: this receive fails, the message stays for one that fits.
      done->emplace_back(req, std::make_unique<Error>(e));
      continue;
    }
    ++next;
    req->key = u->first;
    req->matched = true;
    if (absorb(req, u->second, done)) cts->push_back(req->key);
    if (u->second.parts.empty()) unexpected_.erase(u);
  }
}

void Matching::sendDueCts(const std::vector<MsgKey>& cts) const {
  for (const auto& k : cts) {
    if (ctsDue_) ctsDue_(k.src, k.seq, k.slot);
  }
}

void Matching::account(const std::shared_ptr<RecvRequest>& req, size_t bytes, DoneList* done) {
  req->received += bytes;
  if (req->received == req->bytes) {
    posted_.erase(req->key);
    done->emplace_back(req, nullptr);
  }
}

void Matching::finishAll(DoneList& done) {
  for (auto& [req, err] : done) req->finish(err.get());
  done.clear();
}

void* Matching::incoming(const FrameHeader& h) {
  DoneList done;
  std::vector<MsgKey> cts;
  void* dst = nullptr;
  {
    std::unique_lock<std::mutex> lock(mu_);
    bool rebound = false;  // an any-source receive took this pair's next message
    const MsgKey key{static_cast<uint8_t>(h.isP2P() ? 1 : 0), h.seq, h.slot, h.src};
    bool overBudget = false;
    for (;;) {
      if (poison_) throw *poison_;
      if (!h.isP2P()) checkCollective(h);
      auto it = posted_.find(key);
      if (it == posted_.end() && h.isP2P() && bindAnySource(h)) {
        it = posted_.find(key);
        rebound = true;
      }
      if (it != posted_.end()) {
        const auto req = it->second;  // copy: account() may erase the map entry
        validatePosted(*req, h);
        if (h.length == 0) {
          account(req, 0, &done);
        } else {
          ++req->inflight;
          dst = req->dst + h.offset;
        }
        break;
      }
      if (h.length == 0 || unexpectedBytes_ + h.length <= budget_ || overBudget) {
        Unexpected& u = unexpected_[key];
        if (u.parts.empty() && u.arrival == 0) {
          u.first = h;
          u.arrival = ++arrivals_;
        }
        if (h.length > 0) {
          u.parts.push_back({h.offset, h.length, pool_.get(h.length), false});
          unexpectedBytes_ += h.length;
          dst = u.parts.back().data.data();
        }
        break;
      }
      // Over budget: stop reading this socket until a receive is posted or
      // buffered data is consumed (TCP back-pressure reaches the sender).
      // Bounded, so that a sender that runs far ahead cannot wedge the
      // connection: past the wait the frame is buffered anyway.
      if (budgetCv_.wait_for(lock, kBudgetWait) == std::cv_status::timeout) {
        overBudget = true;
        uint64_t dropped = 0;
        if (budgetLog_.allow(&dropped)) {
          MCCL_LOG(kWarn, ctx_.group, ": rank ", ctx_.rank, " buffers ",
                   unexpectedBytes_ + h.length, " bytes of messages that arrived before their "
                   "receives were posted (MCCL_UNEXPECTED_BYTES=", budget_, ")");
        }
      }
    }
    if (rebound) rematchAnySource(h.src, h.slot, &done, &cts);
  }
  finishAll(done);
  sendDueCts(cts);
  return dst;
}

bool Matching::settlePart(const MsgKey& key, void* dst, bool ok, DoneList* done) {
  auto u = unexpected_.find(key);
  if (u == unexpected_.end()) return false;
  auto& parts = u->second.parts;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].data.data() != dst) continue;
    const auto req = u->second.bound;
    const bool keep = ok && !poison_;
    if (keep && !req) {
      parts[i].complete = true;  // waits for its receive to be posted
      return true;
    }
    if (keep) {
      std::memcpy(req->dst + parts[i].offset, parts[i].data.data(), parts[i].length);
      account(req, parts[i].length, done);
    }
    unexpectedBytes_ -= parts[i].length;
    parts.erase(parts.begin() + static_cast<long>(i));
    if (parts.empty()) unexpected_.erase(u);
    budgetCv_.notify_all();
    return true;
  }
  return false;
}

void Matching::incomingDone(const FrameHeader& h, void* dst, bool ok) {
  if (h.length == 0) return;
  DoneList done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const MsgKey key{static_cast<uint8_t>(h.isP2P() ? 1 : 0), h.seq, h.slot, h.src};
    if (!settlePart(key, dst, ok, &done)) {
      // The payload went straight into a posted receive.
      std::shared_ptr<RecvRequest> req;
      if (auto p = posted_.find(key); p != posted_.end()) {
        req = p->second;
      } else {
        auto f = failing_.find(key);
        MCCL_CHECK(f != failing_.end(), "no receive for the frame ", h.describe());
        req = f->second;
      }
      --req->inflight;
      if (req->failedWith) {
        if (req->inflight == 0) {
          failing_.erase(key);
          done.emplace_back(req, std::move(req->failedWith));
        }
      } else if (ok) {
        account(req, h.length, &done);
      }
    }
  }
  finishAll(done);
}

bool Matching::absorb(const std::shared_ptr<RecvRequest>& req, Unexpected& u, DoneList* done) {
  const FrameHeader& h = u.first;
  validatePosted(*req, h);
  if (u.rts) {
    posted_[req->key] = req;  // the data comes after our clear-to-send
    return true;
  }
  size_t got = 0;
  bool pending = false;
  for (auto it = u.parts.begin(); it != u.parts.end();) {
    if (!it->complete) {
      pending = true;
      ++it;
      continue;
    }
    std::memcpy(req->dst + it->offset, it->data.data(), it->length);
    got += it->length;
    unexpectedBytes_ -= it->length;
    it = u.parts.erase(it);
  }
  budgetCv_.notify_all();
  if (pending) u.bound = req;
  posted_[req->key] = req;
  account(req, got, done);
  return false;
}

bool Matching::post(const std::shared_ptr<RecvRequest>& req) {
  DoneList done;
  std::vector<MsgKey> due;
  bool cts = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (poison_) {
      done.emplace_back(req, std::make_unique<Error>(*poison_));
    } else {
      if (req->key.p2p) req->key.seq = recvCounter_[{req->key.src, req->key.slot}];
      auto u = unexpected_.find(req->key);
      // A mismatch with the message already here throws before anything
      // changes: the message stays for a receive that fits it.
      if (u != unexpected_.end()) validatePosted(*req, u->second.first);
      if (req->key.p2p) ++recvCounter_[{req->key.src, req->key.slot}];
      auto closed = closedSources_.find(req->key.src);
      if (u == unexpected_.end() && closed != closedSources_.end()) {
        done.emplace_back(req, std::make_unique<Error>(closed->second));
      } else if (u == unexpected_.end()) {
        posted_[req->key] = req;
        budgetCv_.notify_all();
      } else {
        cts = absorb(req, u->second, &done);
        if (u->second.parts.empty()) unexpected_.erase(u);
      }
      // This pair's next message may be one an any-source receive waits for.
      if (req->key.p2p) rematchAnySource(req->key.src, req->key.slot, &done, &due);
    }
  }
  finishAll(done);
  sendDueCts(due);
  return cts;
}

bool Matching::postAnySource(const std::shared_ptr<RecvRequest>& req) {
  DoneList done;
  std::vector<MsgKey> due;
  bool cts = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    req->anySource = true;
    if (poison_) {
      done.emplace_back(req, std::make_unique<Error>(*poison_));
    } else {
      // The earliest buffered message with this tag that is next in its pair's order.
      auto best = unexpected_.end();
      for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
        const MsgKey& k = it->first;
        if (!k.p2p || k.slot != req->key.slot) continue;
        if (k.seq != recvCounter_[{k.src, k.slot}]) continue;
        if (best == unexpected_.end() || it->second.arrival < best->second.arrival) best = it;
      }
      if (best == unexpected_.end()) {
        anySource_.push_back(req);
      } else {
        validatePosted(*req, best->second.first);  // before anything changes, as post() does
        req->key = best->first;
        req->matched = true;
        ++recvCounter_[{req->key.src, req->key.slot}];
        cts = absorb(req, best->second, &done);
        if (best->second.parts.empty()) unexpected_.erase(best);
        rematchAnySource(req->key.src, req->key.slot, &done, &due);
      }
    }
  }
  finishAll(done);
  sendDueCts(due);
  return cts;
}

bool Matching::incomingRts(const FrameHeader& h) {
  DoneList done;
  std::vector<MsgKey> due;
  bool cts = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (poison_) throw *poison_;
    const MsgKey key{1, h.seq, h.slot, h.src};
    auto it = posted_.find(key);
    bool rebound = false;
    if (it == posted_.end() && bindAnySource(h)) {
      it = posted_.find(key);
      rebound = true;
    }
    if (it != posted_.end()) {
      validatePosted(*it->second, h);
      cts = true;
      if (rebound) rematchAnySource(h.src, h.slot, &done, &due);
    } else {
      Unexpected& u = unexpected_[key];
      u.first = h;
      u.arrival = ++arrivals_;
      u.rts = true;
    }
  }
  finishAll(done);
  sendDueCts(due);
  return cts;
}

bool Matching::cancel(const std::shared_ptr<RecvRequest>& req) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = anySource_.begin(); it != anySource_.end(); ++it) {
    if (*it == req) {
      anySource_.erase(it);
      return true;
    }
  }
  auto it = posted_.find(req->key);
  if (it != posted_.end() && it->second == req && req->received == 0 && req->inflight == 0) {
    posted_.erase(it);
    return true;
  }
  return false;
}

void Matching::beginOp(uint64_t seq, const OpSignature& sig) {
  std::lock_guard<std::mutex> lock(mu_);
  MCCL_CHECK_EQ(seq, nextToStart_);
  nextToStart_ = seq + 1;
  active_[seq] = sig;
  // Frames that arrived before this op started are checked now.
  auto it = unexpected_.lower_bound(MsgKey{0, seq, 0, 0});
  for (; it != unexpected_.end() && !it->first.p2p && it->first.seq == seq; ++it) {
    if (!sig.matches(it->second.first)) {
      throwError(ErrorKind::kUsage, mismatchText(seq, sig, it->second.first));
    }
  }
}

void Matching::endOp(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(seq);
}

void Matching::sourceClosed(uint32_t src, const Error& e) {
  DoneList done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closedSources_.emplace(src, e);
    for (auto it = posted_.begin(); it != posted_.end();) {
      auto req = it->second;
      if (req->key.src != src) {
        ++it;
        continue;
      }
      if (req->inflight == 0) {
        done.emplace_back(req, std::make_unique<Error>(e));
      } else {
        req->failedWith = std::make_unique<Error>(e);
        failing_[it->first] = req;
      }
      it = posted_.erase(it);
    }
  }
  finishAll(done);
}

void Matching::failAll(const Error& e) {
  DoneList done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!poison_) poison_ = std::make_unique<Error>(e);
    for (auto& [key, req] : posted_) {
      if (req->inflight == 0) {
        done.emplace_back(req, std::make_unique<Error>(*poison_));
      } else {
        // A receive thread is writing into its memory: finish it when it stops.
        req->failedWith = std::make_unique<Error>(*poison_);
        failing_[key] = req;
      }
    }
    for (auto& req : anySource_) done.emplace_back(req, std::make_unique<Error>(*poison_));
    posted_.clear();
    anySource_.clear();
    // Buffered parts stay until their reads settle (a thread may be writing
    // into one); they are freed with the engine.
  }
  budgetCv_.notify_all();
  finishAll(done);
}

}  // namespace mccl
