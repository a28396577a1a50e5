// OpContext: what a collective algorithm sees while it runs on a worker.
//
// Algorithms post sends and receives of whole messages, identified by a
// slot number of their choosing, and wait for them; they never touch
// sockets. Sends are zero copy (the memory must stay untouched until the
// send is waited for); receives land directly in the given memory.
//
// Every wait honours the op's deadline and the communicator's poison, and
// throws an mccl::Error naming this rank, the op, the transfer and the peer.
// When the algorithm returns or throws, the context waits until no transfer
// can still touch the op's memory, so the caller may release it.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "reduce/reduce.h"

namespace mccl {

class OpContext {
 public:
  OpContext(Communicator& comm, uint64_t seq, const OpSignature& sig, Deadline deadline);
  ~OpContext();
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  uint64_t seq() const { return seq_; }
  const OpSignature& sig() const { return sig_; }
  const CommConfig& config() const { return comm_.config(); }
  Deadline deadline() const { return deadline_; }

  std::shared_ptr<SendRequest> isend(int peer, uint32_t slot, const void* data, size_t bytes);
  std::shared_ptr<RecvRequest> irecv(int peer, uint32_t slot, void* data, size_t bytes);
  void wait(const Transfer& t);
  template <typename Container>
  void waitAll(const Container& transfers) {
    for (const auto& t : transfers) wait(*t);
  }

  // Scratch memory from the communicator's pool, returned when dropped.
  Scratch scratch(size_t bytes) { return comm_.scratch().get(bytes); }

  // Called by the worker after the algorithm returned normally: waits for any
  // transfer it left outstanding.
  void finish();
  // Called after a failure: withdraws unmatched receives and waits, bounded,
  // until no transfer can touch the op's memory.
  void drain();

 private:
  [[noreturn]] void throwTimeout(const Transfer& t);
  void track(std::shared_ptr<Transfer> t);

  Communicator& comm_;
  const uint64_t seq_;
  const OpSignature sig_;
  const Deadline deadline_;
  const Clock::time_point start_;
  std::shared_ptr<Notifier> notifier_;
  std::vector<std::shared_ptr<Transfer>> transfers_;
};

}  // namespace mccl
