#include "comm/op_context.h"

#include "util/check.h"
#include "util/logging.h"

namespace mccl {

OpContext::OpContext(Communicator& comm, uint64_t seq, const OpSignature& sig, Deadline deadline)
    : comm_(comm),
      seq_(seq),
      sig_(sig),
      deadline_(deadline),
      start_(Clock::now()),
      notifier_(std::make_shared<Notifier>()) {
  comm_.registerNotifier(notifier_.get());
}

OpContext::~OpContext() { comm_.unregisterNotifier(notifier_.get()); }

void OpContext::track(std::shared_ptr<Transfer> t) {
  // Keep the list short on long pipelines: forget transfers that are done.
  if (transfers_.size() >= 256) {
    std::erase_if(transfers_, [](const std::shared_ptr<Transfer>& x) { return x->done(); });
  }
  transfers_.push_back(std::move(t));
}

std::shared_ptr<SendRequest> OpContext::isend(int peer, uint32_t slot, const void* data,
                                              size_t bytes) {
  MCCL_CHECK(peer >= 0 && peer < size() && peer != rank(), "bad peer ", peer);
  FrameHeader h;
  h.group = comm_.groupId();
  h.seq = seq_;
  h.slot = slot;
  h.src = static_cast<uint32_t>(rank());
  sig_.stamp(&h);
  auto req = std::make_shared<SendRequest>(
      peer, MsgKey{0, seq_, slot, static_cast<uint32_t>(rank())}, sig_.op, bytes);
  req->notifier = notifier_;
  track(req);
  comm_.postSend(req, h, data, deadline_);
  return req;
}

std::shared_ptr<RecvRequest> OpContext::irecv(int peer, uint32_t slot, void* data, size_t bytes) {
  MCCL_CHECK(peer >= 0 && peer < size() && peer != rank(), "bad peer ", peer);
  auto req = std::make_shared<RecvRequest>(MsgKey{0, seq_, slot, static_cast<uint32_t>(peer)},
                                           data, bytes, sig_);
  req->notifier = notifier_;
  track(req);
  comm_.matching().post(req);
  return req;
}

void OpContext::throwTimeout(const Transfer& t) {
  double waited = secondsSince(start_);
  std::string peer = t.peerRank() >= 0 ? comm_.peerName(t.peerRank()) : std::string("the peer");
  throwError(ErrorKind::kTimeout, comm_.selfName(), ": ", sig_.describe(), " #", seq_,
             " timed out after ", waited, " s waiting for the ", t.describe(), "; ", peer,
             " may be slow, stopped or dead, or it did not call this collective");
}

void OpContext::wait(const Transfer& t) {
  std::unique_lock<std::mutex> lock(notifier_->mutex());
  while (!t.done()) {
    if (comm_.poisoned()) throw comm_.poisonError();
    if (deadline_.isNever()) {
      notifier_->cv().wait(lock);
    } else if (notifier_->cv().wait_until(lock, deadline_.time()) == std::cv_status::timeout &&
               !t.done()) {
      if (comm_.poisoned()) throw comm_.poisonError();
      throwTimeout(t);
    }
  }
  if (t.error() != nullptr) {
    // Report the root cause, not the symptom ("connection is closing").
    if (comm_.poisoned()) throw comm_.poisonError();
    throw *t.error();
  }
}

void OpContext::finish() {
  for (const auto& t : transfers_) wait(*t);
  transfers_.clear();
}

void OpContext::drain() {
  // Receives that have not matched can simply be withdrawn.
  for (auto& t : transfers_) {
    if (auto r = std::dynamic_pointer_cast<RecvRequest>(t); r && !r->done()) {
      if (comm_.matching().cancel(r)) r->finish(nullptr);
    }
  }
  auto allDone = [&] {
    for (const auto& t : transfers_) {
      if (!t->done()) return false;
    }
    return true;
  };
  // The communicator is poisoned: sends fail as their connections go down and
  // receives as their in-flight payloads stop. Give that a moment, then force it.
  for (int round = 0; round < 2; ++round) {
    Deadline limit = Deadline::after(std::chrono::milliseconds(round == 0 ? 1000 : 10000));
    std::unique_lock<std::mutex> lock(notifier_->mutex());
    while (!allDone() && !limit.expired()) {
      notifier_->cv().wait_until(lock, limit.time());
    }
    if (allDone()) break;
    lock.unlock();
    comm_.interruptConnections();
  }
  if (!allDone()) {
    MCCL_LOG(kError, comm_.selfName(), ": ", sig_.describe(), " #", seq_,
             " could not retire all of its transfers after a failure");
  }
  transfers_.clear();
}

}  // namespace mccl
