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
// A successor counted as told may turn out not to have been: its
// connection was still up when the relay looked, but it had died (its EOF
// not yet read), or it was shutting down. When that rank's link fails or it
// says goodbye (lost()), the relay goes on past it.
//
// Threads: start() from any thread (the first call wins); the relay runs on
// its own thread ("mccl-relay"), which after a success waits for lost() until
// finish(); lost() from any thread; finish() from the thread that stops the
// group: it waits up to `grace` while the relay is dialling, then for the
// dial in flight (bounded by `dial`).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
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

  // Tries `order` (ranks, nearest successor first) until one is reached.
  // Runs once; a call after finish() does nothing.
  void start(std::vector<int> order, std::chrono::milliseconds dial, Reach reach);
  // `rank` failed or said goodbye: if the relay counted it as told, it goes
  // on with the rank after it.
  void lost(int rank);
  // Waits up to `grace` while the relay dials, then stops it and joins its
  // thread. Idempotent.
  void finish(Deadline grace);
  // Ranks the relay tried, in order (tests, diagnostics).
  std::vector<int> tried() const;

 private:
  void run(std::chrono::milliseconds dial, Reach reach);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool busy_ = false;  // dialling, or about to
  bool stop_ = false;
  std::vector<int> order_;
  size_t at_ = 0;       // the rank tried now, or the one it stopped at
  std::set<int> lost_;  // ranks whose link failed or that said goodbye
  std::vector<int> tried_;
  std::thread thread_;
};

}  // namespace mccl
