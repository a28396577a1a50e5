// OpHost: what a running collective (OpContext) may ask of its group, and
// nothing more. The Communicator implements it; OpContext sees only this.
//
// Threads: every method may be called from any thread that runs or resumes
// an op (the engine thread, a caller's thread for small ops, connection
// threads that complete transfers).
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "comm/config.h"
#include "comm/cost_model.h"
#include "comm/scratch.h"
#include "comm/transfer.h"
#include "comm/work.h"
#include "util/time.h"

namespace mccl {

class OpHost {
 public:
  virtual ~OpHost() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const CommConfig& config() const = 0;
  // The group's cost model (rank 0's, agreed at bootstrap).
  virtual const CostModel& model() const = 0;
  virtual uint64_t groupId() const = 0;
  // "mccl rank 1/4 in group 'default_pg'" and "rank 2 (10.0.0.2:41000)".
  virtual std::string selfName() const = 0;
  virtual std::string peerName(int rank) const = 0;
  // What this rank waits for while it connects to peers, e.g. "address of
  // rank 3, which is not in the store (...)"; "" when it connects to none.
  virtual std::string connectingTo() const = 0;

  // Sends `data` (req->bytes, untouched until req finishes) to req->peer as
  // frames built from `tmpl`; failures finish `req`. Never blocks on the
  // network (it may connect first, within `deadline`).
  virtual void postSend(const std::shared_ptr<SendRequest>& req, const FrameHeader& tmpl,
                        const void* data, Deadline deadline) = 0;
  // Posts a receive; frames that already arrived are matched at once.
  virtual void postRecv(const std::shared_ptr<RecvRequest>& req) = 0;
  // Scratch memory from the group's pool, returned when dropped.
  virtual Scratch scratch(size_t bytes) = 0;

  virtual bool poisoned() const = 0;
  // The poisoning error; only valid when poisoned().
  virtual Error poisonError() const = 0;
  // Fails the group (first error wins) and tells the peers.
  virtual void poison(const Error& e) = 0;
  // An op's Work is final: bookkeeping, then completes `work` (its callbacks
  // run on this thread). Once per op.
  virtual void opCompleted(uint64_t seq, std::shared_ptr<Work> work, std::exception_ptr error) = 0;
};

}  // namespace mccl
