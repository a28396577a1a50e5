// Shrink: the ranks that stay make a smaller group out of the live one, over
// the same connections and ports, without the store; SHRINK_ABORT fails the
// parent's pending ops at once; a peer that shrinks first may send on the
// new group before this rank has shrunk.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "harness.h"

namespace mccl::test {
namespace {

using Clock = std::chrono::steady_clock;

// Sums `count` int64 values that are distinct per (rank, i) over the group.
void checkSum(Communicator& comm, size_t count, int salt, const std::vector<int>& wireOf) {
  std::vector<int64_t> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = 1000 * wireOf[comm.rank()] + static_cast<int64_t>(i) + salt;
  AllreduceOptions o;
  o.buf = buf.data();
  o.count = count;
  o.dtype = DataType::kInt64;
  allreduce(comm, o)->wait();
  int64_t ranks = 0;
  for (int r = 0; r < comm.size(); ++r) ranks += 1000 * wireOf[r];
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(buf[i], ranks + comm.size() * (static_cast<int64_t>(i) + salt))
        << "rank " << comm.rank() << "/" << comm.size() << " at " << i;
  }
}

std::vector<int> survivors(int n, const std::vector<int>& excluded) {
  std::vector<int> s;
  for (int r = 0; r < n; ++r) {
    if (std::find(excluded.begin(), excluded.end(), r) == excluded.end()) s.push_back(r);
  }
  return s;
}

// Every survivor of 5 ranks drops rank 2 and keeps computing; the new group
// listens where the old one did and made no new connection to a survivor.
TEST(Shrink, DefaultKeepsConnectionsAndPorts) {
  const int n = 5;
  std::atomic<int> shrunk{0};
  runRanks(n, [&](Communicator& comm) {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    checkSum(comm, 1031, 1, all);
    if (comm.rank() == 2) {
      while (shrunk.load() < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;  // leaves: the harness shuts its group down
    }
    const size_t before = comm.numConnections();
    const std::string addr = comm.address().toString();
    auto child = comm.shrink({2}, false, "shrunk");
    ++shrunk;
    EXPECT_EQ(child->size(), n - 1);
    EXPECT_EQ(child->rank(), comm.rank() < 2 ? comm.rank() : comm.rank() - 1);
    EXPECT_EQ(child->address().toString(), addr);
    EXPECT_EQ(child->familyRanks(), survivors(n, {2}));
    for (int round = 0; round < 3; ++round) checkSum(*child, 13 + round, round, child->familyRanks());
    // Point-to-point on the new ranks: a ring.
    const int r = child->rank(), m = child->size();
    int64_t out = 7 * r, in = -1;
    auto s = send(*child, (r + 1) % m, 3, &out, 1, DataType::kInt64);
    recv(*child, (r + m - 1) % m, 3, &in, 1, DataType::kInt64)->wait();
    s->wait();
    EXPECT_EQ(in, 7 * ((r + m - 1) % m));
    // No connection was opened to a survivor (connections only close).
    EXPECT_LE(child->numConnections(), before);
    // The parent is retired: its calls name the group that replaced it.
    int64_t x = 0;
    AllreduceOptions o;
    o.buf = &x;
    o.count = 1;
    o.dtype = DataType::kInt64;
    try {
      allreduce(comm, o);
      ADD_FAILURE() << "the retired group accepted an op";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shrink_group replaced"), std::string::npos) << e.what();
    }
    child->shutdown();
  });
}

// A rank stops answering with an op pending on every rank: SHRINK_ABORT
// fails that op at once (not at its timeout), naming the shrink, and the
// survivors' next collective is correct.
TEST(Shrink, AbortFailsPendingOpsAtOnce) {
  const int n = 4;
  std::atomic<int> shrunk{0};
  runRanks(n, [&](Communicator& comm) {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    checkSum(comm, 5, 0, all);
    if (comm.rank() == 3) {
      while (shrunk.load() < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    std::vector<int64_t> buf(1000, comm.rank());
    AllreduceOptions o;
    o.buf = buf.data();
    o.count = buf.size();
    o.dtype = DataType::kInt64;
    auto pending = allreduce(comm, o);  // rank 3 never joins it
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto t0 = Clock::now();
    auto child = comm.shrink({3}, true, "survivors");
    try {
      pending->wait();
      ADD_FAILURE() << "the pending op completed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kAborted);
      EXPECT_NE(std::string(e.what()).find("SHRINK_ABORT"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
    ++shrunk;
    checkSum(*child, 1031, 4, child->familyRanks());
    child->shutdown();
  }, [](CommConfig& c) { c.timeout = std::chrono::seconds(30); });
}

// Shrinking twice (7 -> 6 -> 4), odd sizes, rings and recursive doubling on
// family ranks that are no longer 0..n-1.
TEST(Shrink, Twice) {
  const int n = 7;
  std::atomic<int> first{0}, second{0};
  runRanks(n, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      while (first.load() < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    auto a = comm.shrink({1}, false, "a");
    ++first;
    checkSum(*a, 4099, 2, a->familyRanks());  // ring
    if (a->rank() == 0 || a->rank() == 4) {
      while (second.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      a->shutdown();
      return;
    }
    auto b = a->shrink({0, 4}, false, "b");
    ++second;
    EXPECT_EQ(b->size(), 4);
    checkSum(*b, 3, 5, b->familyRanks());
    checkSum(*b, 100003, 6, b->familyRanks());
    b->shutdown();
    a->shutdown();
  });
}

// One survivor shrinks late: the others already run a collective on the new
// group, whose frames wait at the late rank until it has shrunk too.
TEST(Shrink, EarlyFramesWaitForTheLateRank) {
  const int n = 4;
  std::atomic<int> shrunk{0};
  runRanks(n, [&](Communicator& comm) {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    checkSum(comm, 64, 0, all);
    if (comm.rank() == 0) {
      while (shrunk.load() < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    if (comm.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto child = comm.shrink({0}, false, "late");
    ++shrunk;
    checkSum(*child, 100003, 1, child->familyRanks());
    child->shutdown();
  });
}

// A peer shrinks and sends on the new group, but this rank shuts down
// instead of shrinking: its receive thread, held for the group it will not
// make, lets go, so shutting down does not wait out the group timeout.
TEST(Shrink, ShuttingDownInsteadOfShrinkingDoesNotWaitForTheTimeout) {
  const int n = 3;
  std::atomic<bool> sent{false}, closed{false};
  runRanks(n, [&](Communicator& comm) {
    checkSum(comm, 64, 0, {0, 1, 2});
    if (comm.rank() == 2) {  // excluded; stays until rank 0 is down
      while (!closed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    if (comm.rank() == 0) {
      while (!sent.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 1's frames are here
      const auto t0 = Clock::now();
      comm.shutdown();
      const auto took = Clock::now() - t0;
      closed = true;
      EXPECT_LT(took, std::chrono::seconds(10)) << "shutdown waited for the 30 s group timeout";
      return;
    }
    auto child = comm.shrink({2}, false, "early");
    std::vector<int64_t> buf(1024, 1);
    AllreduceOptions o;
    o.buf = buf.data();
    o.count = buf.size();
    o.dtype = DataType::kInt64;
    auto work = allreduce(*child, o);
    sent = true;
    try {
      work->wait();
      ADD_FAILURE() << "an all-reduce with a rank that shut down completed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
    }
    child->shutdown();
  }, [](CommConfig& c) { c.timeout = std::chrono::seconds(30); });
}

// Bad arguments are refused before anything changes; the group stays usable.
TEST(Shrink, BadArgumentsLeaveTheGroupUsable) {
  runRanks(3, [&](Communicator& comm) {
    for (auto bad : std::vector<std::vector<int>>{{}, {3}, {-1}, {1, 1}, {comm.rank()}}) {
      try {
        comm.shrink(bad, false, "bad");
        ADD_FAILURE() << "shrink accepted a bad exclusion list";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
      }
    }
    checkSum(comm, 17, 3, {0, 1, 2});
  });
}

}  // namespace
}  // namespace mccl::test
