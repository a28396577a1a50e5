// Communicator::learnAddresses: a group whose ranks learned every listen
// address connects without its store afterwards (an elastic job's store may
// go away, or restart empty, while the members train); without it, the
// first connection made after the store is gone fails, naming the address.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "harness.h"
#include "typed.h"
#include "util/error.h"

namespace mccl::test {
namespace {

// A MemoryStore that can be lost: every call after lose() fails.
class LosableStore : public Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    if (lost_.load()) throwError(ErrorKind::kRemote, "the store is gone");
    base_.set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    if (lost_.load()) throwError(ErrorKind::kRemote, "the store is gone");
    return base_.get(key, timeout);
  }
  void lose() { lost_.store(true); }

 private:
  MemoryStore base_;
  std::atomic<bool> lost_{false};
};

// n ranks form a group (learning every address or not), the store is lost,
// then every rank exchanges a message with every other (a connection per
// pair, none made before). Returns each rank's error text ("" if none).
std::vector<std::string> everyPairAfterTheStoreIsLost(int n, bool learn) {
  Watchdog dog(std::chrono::seconds(120), "everyPairAfterTheStoreIsLost");
  auto store = std::make_shared<LosableStore>();
  std::atomic<int> formed{0};
  std::atomic<bool> lost{false};
  std::atomic<int> done{0};
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::shared_ptr<Communicator> comm;
      try {
        CommConfig cfg = baseConfig(r, n);
        cfg.timeout = std::chrono::seconds(10);
        comm = Communicator::create(store, cfg);
        if (learn) comm->learnAddresses();
        formed.fetch_add(1);
        while (formed.load() < n) std::this_thread::yield();
        if (r == 0) {
          store->lose();
          lost.store(true);
        }
        while (!lost.load()) std::this_thread::yield();
        std::vector<int64_t> out(static_cast<size_t>(n)), in(static_cast<size_t>(n), -1);
        std::vector<std::shared_ptr<Work>> works;
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          out[static_cast<size_t>(p)] = 1000 * r + p;
          works.push_back(recv(*comm, p, 5, &in[static_cast<size_t>(p)], 1, DataType::kInt64));
          works.push_back(send(*comm, p, 5, &out[static_cast<size_t>(p)], 1, DataType::kInt64));
        }
        for (auto& w : works) w->wait();
        for (int p = 0; p < n; ++p) {
          if (p != r) EXPECT_EQ(in[static_cast<size_t>(p)], 1000 * p + r) << "rank " << r << " from " << p;
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        if (formed.load() < n) formed.fetch_add(1);  // never leave the others spinning
        lost.store(true);
      }
      // Every rank is through its transfers before any closes its connections.
      done.fetch_add(1);
      while (done.load() < n) std::this_thread::yield();
      if (comm) comm->abort();
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(LearnAddresses, EveryPairConnectsAfterTheStoreIsLost) {
  for (int n : {2, 3, 5}) {
    auto errors = everyPairAfterTheStoreIsLost(n, /*learn=*/true);
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << n;
  }
}

TEST(LearnAddresses, WithoutItTheFirstConnectionNeedsTheStore) {
  auto errors = everyPairAfterTheStoreIsLost(3, /*learn=*/false);
  bool named = false;
  for (const auto& e : errors) named = named || e.find("the address of rank") != std::string::npos;
  EXPECT_TRUE(named) << "no rank failed naming an address: " << errors[0] << " | " << errors[1] << " | "
                     << errors[2];
}

}  // namespace
}  // namespace mccl::test
