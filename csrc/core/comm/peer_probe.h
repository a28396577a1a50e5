// PeerProbe: finds a dead peer that this rank waits for but was never
// connected to.
//
// A peer's death is seen on its connections (reset, or EOF without a
// goodbye). Connections open lazily, on a sender's first send, so a rank that
// waits to receive from a peer that died before it sent (the root of a
// broadcast, say) has no connection that could tell it, and would wait out
// its op's timeout. So a receive from a peer this rank was never connected
// to asks for a probe: if the peer has still not connected `delay` later,
// this rank dials it. A peer that answers is now connected (its death would
// be seen); one that refuses (its process is gone, or it shut the group
// down) fails the group at once, naming it (see Communicator::probePeer).
// A dial that proves neither (a handshake dropped by a listener that was
// closing as it connected, a dial that timed out on a busy host) is tried
// again `delay` later, up to kMaxDials times while the probe is needed.
//
// Threads: expect() from any thread; the probes run on one thread
// ("mccl-probe"), started when a probe is asked and ending when none is
// due; finish() from the thread that stops the group, which drops the
// probes not yet due and waits for the one in flight (its dial is bounded by
// its deadline; what follows it checks stopping()).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "util/time.h"

namespace mccl {

class PeerProbe {
 public:
  // needed(rank): whether `rank` still needs a probe (never connected, the
  // group live). dial(rank, deadline): the probe itself; false when it
  // proved nothing (then dialled again after the delay).
  using Needed = std::function<bool(int rank)>;
  using Dial = std::function<bool(int rank, Deadline deadline)>;
  static constexpr int kMaxDials = 8;

  PeerProbe(int size, std::chrono::milliseconds delay, std::chrono::milliseconds dial, Needed needed,
            Dial dialFn);
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // A receive from `rank` was posted and no connection to it ever existed.
  void expect(int rank);
  // Drops the probes not yet due, then joins the thread. Idempotent; later
  // expect() calls do nothing.
  void finish();
  // Whether finish() was called (a probe in flight ends early).
  bool stopping() const;
  // Probes dialled so far (tests, diagnostics).
  int dialled() const;

 private:
  void loop();

  const std::chrono::milliseconds delay_, dial_;
  const Needed needed_;
  const Dial dialFn_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Clock::time_point> due_;  // per rank; max() = no probe pending
  std::vector<bool> asked_;             // per rank: a probe was asked once
  std::vector<int> dials_;              // per rank: dials so far
  bool stop_ = false;
  bool running_ = false;  // the thread is in loop()
  int dialled_ = 0;
  std::thread thread_;
};

}  // namespace mccl
