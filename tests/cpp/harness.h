// Runs N ranks as threads in this process, each with its own Communicator
// over real loopback sockets and a shared in-memory store.
//
// A watchdog aborts the whole test binary with a message if the ranks do not
// finish in time, so a hang fails loudly instead of stalling CI; an exception
// on any rank is re-raised as a test failure naming the rank.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algo/collectives.h"
#include "comm/communicator.h"
#include "comm/store.h"

namespace mccl::test {

inline CommConfig baseConfig(int rank, int size) {
  CommConfig c = CommConfig::fromEnv(rank, size);
  c.routeHost = "127.0.0.1";
  c.socketIfname = "";
  c.timeout = std::chrono::seconds(getenv("MCCL_TEST_TIMEOUT_S") ? atoi(getenv("MCCL_TEST_TIMEOUT_S")) : 60);
  c.groupName = "test";
  return c;
}

class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, std::string what) {
    thread_ = std::thread([this, limit, what] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, limit, [&] { return done_; })) {
        std::fprintf(stderr, "WATCHDOG: %s did not finish within %lld s; aborting\n", what.c_str(),
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

using RankFn = std::function<void(Communicator& comm)>;
using ConfigFn = std::function<void(CommConfig&)>;

// Creates `n` communicators (one per thread), runs fn on each, shuts them
// down, and fails the test for every rank that threw.
inline void runRanks(int n, const RankFn& fn, const ConfigFn& configure = nullptr,
                     std::chrono::seconds limit = std::chrono::seconds(120)) {
  Watchdog dog(limit, ::testing::UnitTest::GetInstance()->current_test_info()->name());
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommConfig cfg = baseConfig(r, n);
        if (configure) configure(cfg);
        auto comm = Communicator::create(store, cfg);
        fn(*comm);
        comm->shutdown();
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!errors[static_cast<size_t>(r)]) continue;
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " of " << n << " threw: " << e.what();
    }
  }
}

// The cost model `mccl-bench --tune` fitted on the 8-host network lab
// (1 Gbit/s links; docs/benchmarks.md): per-message costs small beside the
// wire time of a chunk, so chains pipeline medium messages.
inline CostModel labModel() {
  return CostModel{.alphaUs = 1.0, .overheadUs = 18.2, .betaNsPerByte = 8.327, .gammaNsPerByte = 0.1064};
}

}  // namespace mccl::test
