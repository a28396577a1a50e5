// AbortRelay: carries a failed group's ABORT to members that no connection
// would tell.
//
// A poisoned group sends its ABORT over the connections it has, and every
// member that hears it does the same, so the news floods the connection
// graph. Connections open lazily, though: a rank that has only received from
// the member that died (a broadcast's leaf, a joiner waiting for its state)
// may have no connection to anyone alive, and would learn of the failure only
// at its op's timeout. So each rank that poisons its group also makes sure
// its next live successor in rank order hears it: a rank it is connected to
// has heard it already; one it is not connected to is dialled (the new
// connection carries the ABORT, see Communicator::adopted); one that cannot
// be reached (dead, or shut down) is passed over for the next. Since every
// rank that hears it does the same, the ABORT goes round the ring of live
// members, at one dial per rank at most in the usual case.
//
// Threads: start() from any thread (the first call wins); the relay runs on
// its own thread ("mccl-relay"); finish() from the thread that stops the
// group. Each dial is bounded by `dial`, so finish() waits at most one dial.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "util/time.h"

namespace mccl {

class AbortRelay {
 public:
  // reach(rank, deadline): whether `rank` has heard (or now hears) the ABORT;
  // false when it cannot be reached before the deadline.
  using Reach = std::function<bool(int rank, Deadline deadline)>;

  AbortRelay() = default;
  ~AbortRelay();
  AbortRelay(const AbortRelay&) = delete;
  AbortRelay& operator=(const AbortRelay&) = delete;

  // Tries `order` (ranks, nearest successor first) until one is reached. Runs
  // once; a call after finish() does nothing.
  void start(std::vector<int> order, std::chrono::milliseconds dial, Reach reach);
  // Waits up to `grace` for the relay to end, then stops it (after the dial
  // in flight) and joins its thread. Idempotent.
  void finish(Deadline grace);
  // Ranks the relay reached or passed over, in order (tests, diagnostics).
  std::vector<int> tried() const;

 private:
  void run(std::vector<int> order, std::chrono::milliseconds dial, Reach reach);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool running_ = false;
  bool stop_ = false;
  std::vector<int> tried_;
  std::thread thread_;
};

}  // namespace mccl
