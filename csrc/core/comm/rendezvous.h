// The group's use of the rendezvous store, and nothing else touches it: the
// bootstrap record rank 0 publishes (a random group id, the group secret or
// the salt it is derived with, rank 0's wire settings, rank
// 0's cost model, so every rank chooses algorithms alike) and each rank's
// listen address. The store is never on the data path.
//
// Threads: any. Calls are serialised here (c10d stores are not all
// thread-safe); a lookup holds the lock for at most its deadline.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "comm/cost_model.h"
#include "comm/store.h"
#include "transport/address.h"
#include "transport/handshake.h"
#include "util/time.h"

namespace mccl {

class Rendezvous {
 public:
  // `who` prefixes errors: "mccl rank 1/4 in group 'default_pg'".
  Rendezvous(std::shared_ptr<Store> store, std::string who);

  struct Record {
    uint64_t group = 0;
    // The group's secret when !keyed; with a job secret, the salt it is
    // derived with (comm/job_secret.h).
    Secret salt{};
    bool keyed = false;    // rank 0 has a job secret
    std::string settings;  // rank 0's wire settings (comm/config.h)
    CostModel model;
  };
  // Rank 0 draws a group id and salt and publishes them with its wire
  // `settings`, whether it is `keyed` and `model`; every other rank reads
  // rank 0's record (waiting up to `timeout`).
  Record exchange(int rank, const CostModel& model, const std::string& settings, bool keyed,
                  std::chrono::milliseconds timeout);
  void publishAddress(int rank, const SockAddr& addr);
  // Rank `peer`'s listen address, waiting until `deadline` (or `timeout`
  // when the deadline is never). Throws naming the peer.
  SockAddr addressOf(int peer, Deadline deadline, std::chrono::milliseconds timeout);

 private:
  std::shared_ptr<Store> store_;
  const std::string who_;
  std::mutex mu_;
};

}  // namespace mccl
