#include "comm/transfer.h"

#include "comm/op_context.h"

namespace mccl {

void Transfer::finish(const Error* err) {
  if (claimed_.exchange(true)) return;
  if (err != nullptr) error_ = std::make_unique<Error>(*err);
  done_.store(true);
  if (op != nullptr) op->transferFinished(*this);  // may resume the op here
  if (onDone) onDone(*this);
}

void SendRequest::sendDone(const Error* err) {
  if (err != nullptr) {
    std::lock_guard<std::mutex> lock(errMu_);
    if (!firstError_) firstError_ = std::make_unique<Error>(*err);
  }
  if (framesLeft_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::shared_ptr<SendRequest> keep = std::move(self_);  // released after finish
    std::unique_ptr<Error> e;
    {
      std::lock_guard<std::mutex> lock(errMu_);
      if (firstError_) e = std::make_unique<Error>(*firstError_);
    }
    finish(e.get());  // without locks held: it may resume an algorithm
  }
}

std::string SendRequest::describe() const {
  if (key.p2p) return strCat("send #", key.seq, " with tag ", key.slot, " (", bytes, " bytes) to rank ", peer);
  return strCat("send of ", opKindName(kind), " #", key.seq, " slot ", key.slot, " (", bytes,
                " bytes) to rank ", peer);
}

std::string RecvRequest::describe() const {
  std::string from = anySource && !matched ? std::string("any rank") : strCat("rank ", key.src);
  if (key.p2p) return strCat("receive with tag ", key.slot, " (", bytes, " bytes) from ", from);
  return strCat("receive of ", opKindName(sig.op), " #", key.seq, " slot ", key.slot, " (",
                bytes, " bytes) from ", from);
}

}  // namespace mccl
