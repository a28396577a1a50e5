#include "comm/op_context.h"

#include "util/check.h"
#include "util/logging.h"
#include "util/trace.h"

namespace mccl {

OpContext::OpContext(OpHost& comm, uint64_t seq, const OpSignature& sig, Deadline deadline,
                     std::shared_ptr<Work> work)
    : comm_(comm),
      seq_(seq),
      sig_(sig),
      deadline_(deadline),
      start_(Clock::now()),
      work_(std::move(work)) {}

OpContext::~OpContext() = default;

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
  req->op = this;
  outstanding_.fetch_add(1);
  comm_.postSend(req, h, data, deadline_);
  return req;
}

std::shared_ptr<RecvRequest> OpContext::irecv(int peer, uint32_t slot, void* data, size_t bytes) {
  MCCL_CHECK(peer >= 0 && peer < size() && peer != rank(), "bad peer ", peer);
  auto req = std::make_shared<RecvRequest>(MsgKey{0, seq_, slot, static_cast<uint32_t>(peer)},
                                           data, bytes, sig_);
  req->op = this;
  outstanding_.fetch_add(1);
  comm_.postRecv(req);
  return req;
}

void OpContext::start(Task body) {
  body_ = std::move(body);
  trace::record(trace::Ev::kOpStart, comm_.rank(), comm_.groupId(), seq_,
                (static_cast<uint32_t>(sig_.op) << 8) | static_cast<uint32_t>(sig_.algo));
  body_.start([this](std::exception_ptr e) { bodyDone(e); });
}

bool OpContext::suspendOn(Transfer* t, std::coroutine_handle<> h) {
  suspended_ = h;
  awaiting_.store(bits(t));
  if (t->done() || failed_.load()) {
    // It finished (or the op failed) meanwhile: take the resumption back,
    // unless the thread that finished it already took it.
    uintptr_t expected = bits(t);
    if (awaiting_.compare_exchange_strong(expected, 0)) return false;
  }
  return true;  // whoever clears awaiting_ resumes us (possibly already has)
}

bool OpContext::suspendOnProgress(Transfer* next, uint64_t seen, std::coroutine_handle<> h) {
  suspended_ = h;
  any_.next = next;
  const uintptr_t token = static_cast<uintptr_t>(++progressWaits_) << 1 | 1;
  awaiting_.store(token);
  // transferFinished counts a receive before it looks at awaiting_: one of
  // the two sees the other. Only this wait's token is taken back: a thread
  // that woke an earlier wait cannot resume this one from here.
  if (received_.load() != seen || failed_.load()) {
    uintptr_t expected = token;
    if (awaiting_.compare_exchange_strong(expected, 0)) return false;
  }
  return true;
}

void OpContext::throwIfFailed() {
  if (failed_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    throw *failure_;
  }
}

void OpContext::afterWait(const Transfer& t) {
  throwIfFailed();
  if (t.error() != nullptr) {
    // Report the root cause, not the symptom ("connection is closing").
    if (comm_.poisoned()) throw comm_.poisonError();
    throw *t.error();
  }
}

void OpContext::fail(const Error& e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_) return;
    failure_ = std::make_unique<Error>(e);
  }
  failed_.store(true);
  if (awaiting_.exchange(0) != 0) suspended_.resume();
}

bool OpContext::timeOut() {
  // Claim the waiting coroutine first: while we hold the claim it cannot
  // resume, so the transfer it waits for stays alive for describe().
  const uintptr_t w = awaiting_.exchange(0);
  Transfer* t = w == 0 ? nullptr : (w & 1) != 0 ? &any_ : reinterpret_cast<Transfer*>(w);
  std::string what = t != nullptr ? t->describe() : std::string("its next transfer");
  int peer = t != nullptr ? t->peerRank() : -1;
  if (t == nullptr) {
    // Not waiting on a transfer: perhaps blocked posting one, connecting.
    if (std::string c = comm_.connectingTo(); !c.empty()) what = c;
  }
  Error e(ErrorKind::kTimeout,
          strCat(comm_.selfName(), ": ", sig_.describe(), " #", seq_, " timed out after ",
                 secondsSince(start_), " s waiting for the ", what, "; ",
                 peer >= 0 ? comm_.peerName(peer) : std::string("the peer"),
                 " may be slow, stopped or dead, or it did not call this collective"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_) failure_ = std::make_unique<Error>(e);
  }
  failed_.store(true);
  if (t == nullptr) return false;
  suspended_.resume();
  return true;
}

void OpContext::transferFinished(Transfer& t) {
  // A transfer that failed dooms the op even while the body waits for a
  // different one (a send whose connection was refused while the body waits
  // for a receive from the same peer): fail it now, not at its timeout.
  if (t.error() != nullptr) fail(comm_.poisoned() ? comm_.poisonError() : *t.error());
  if (t.isReceive()) received_.fetch_add(1);
  uintptr_t expected = bits(&t);
  if (awaiting_.compare_exchange_strong(expected, 0)) {
    suspended_.resume();
  } else if (t.isReceive() && (expected & 1) != 0 && awaiting_.compare_exchange_strong(expected, 0)) {
    suspended_.resume();  // a progress wait (expected holds its token)
  }
  if (outstanding_.fetch_sub(1) == 1) maybeComplete();
}

void OpContext::bodyDone(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    bodyError_ = error;
    bodyEnd_ = Clock::now();
  }
  if (error) {
    // Poison first: the group's state is unknown now, and poisoning fails
    // the transfers still posted so they retire.
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      comm_.poison(e);
    } catch (const std::exception& e) {
      comm_.poison(Error(ErrorKind::kInternal, strCat(comm_.selfName(), ": ", e.what())));
    }
  }
  bodyDone_.store(true);
  maybeComplete();
}

bool OpContext::retiring(Clock::time_point* since) const {
  if (!bodyDone_.load() || completed_.load()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  *since = bodyEnd_;
  return true;
}

void OpContext::maybeComplete() {
  if (!bodyDone_.load() || outstanding_.load() != 0) return;
  if (completed_.exchange(true)) return;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = bodyError_;
  }
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      error = std::make_exception_ptr(
          Error(e.kind(), strCat(work_->description(), " failed: ", e.what())));
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(Error(
          ErrorKind::kInternal, strCat(work_->description(), " failed: ", e.what())));
    }
  }
  trace::record(trace::Ev::kOpEnd, comm_.rank(), comm_.groupId(), seq_, error ? 1 : 0);
  comm_.opCompleted(seq_, work_, error);
  reapable_.store(true);  // the last touch of this object
}

}  // namespace mccl
