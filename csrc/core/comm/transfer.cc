#include "comm/transfer.h"

namespace mccl {

void Transfer::finish(const Error* err) {
  if (claimed_.exchange(true)) return;
  if (err != nullptr) error_ = std::make_unique<Error>(*err);
  if (notifier != nullptr) {
    // Set and signal under the waiter's mutex: a waiter checks done() with
    // the mutex held, so it cannot miss the wake-up.
    std::lock_guard<std::mutex> lock(notifier->mutex());
    done_.store(true, std::memory_order_release);
    notifier->cv().notify_all();
  } else {
    done_.store(true, std::memory_order_release);
  }
  if (onDone) onDone(*this);
}

void SendRequest::sendDone(const Error* err) {
  if (err != nullptr) {
    std::lock_guard<std::mutex> lock(errMu_);
    if (!firstError_) firstError_ = std::make_unique<Error>(*err);
  }
  if (framesLeft_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::shared_ptr<SendRequest> keep = std::move(self_);  // released after finish
    std::lock_guard<std::mutex> lock(errMu_);
    finish(firstError_.get());
  }
}

std::string SendRequest::describe() const {
  if (key.p2p) return strCat("send #", key.seq, " with tag ", key.slot, " (", bytes, " bytes) to rank ", peer);
  return strCat("send of ", opKindName(op), " #", key.seq, " slot ", key.slot, " (", bytes,
                " bytes) to rank ", peer);
}

std::string RecvRequest::describe() const {
  std::string from = anySource && !matched ? std::string("any rank") : strCat("rank ", key.src);
  if (key.p2p) return strCat("receive with tag ", key.slot, " (", bytes, " bytes) from ", from);
  return strCat("receive of ", opKindName(sig.op), " #", key.seq, " slot ", key.slot, " (",
                bytes, " bytes) from ", from);
}

}  // namespace mccl
