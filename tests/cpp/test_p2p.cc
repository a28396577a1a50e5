// Point-to-point: ordering per (peer, tag), any-source receives, mismatched
// sizes, and p2p on a subset of ranks followed by a collective.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "harness.h"
#include "typed.h"

namespace mccl::test {
namespace {

void orderedPerPeerAndTag(size_t eagerBytes) {
  for (int n : {2, 3, 5}) {
    runRanks(n, [&](Communicator& comm) {
      const int r = comm.rank();
      const int msgs = 20;
      std::vector<std::vector<int32_t>> out(static_cast<size_t>(n * msgs)), in(static_cast<size_t>(n * msgs));
      std::vector<std::shared_ptr<Work>> works;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        for (int m = 0; m < msgs; ++m) {
          size_t k = static_cast<size_t>(p * msgs + m);
          size_t len = static_cast<size_t>(1 + (m * 131) % 5003);
          in[k].assign(len, -1);
          // Same tag for all: order alone tells the messages apart.
          works.push_back(recv(comm, p, 7, in[k].data(), len, DataType::kInt32));
          out[k].assign(len, r * 100000 + m);
          works.push_back(send(comm, p, 7, out[k].data(), len, DataType::kInt32));
        }
      }
      for (auto& w : works) w->wait();
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        for (int m = 0; m < msgs; ++m) {
          for (int32_t v : in[static_cast<size_t>(p * msgs + m)]) ASSERT_EQ(v, p * 100000 + m) << "from " << p << " message " << m;
        }
      }
    }, [&](CommConfig& c) {
      c.frameBytes = 4096;
      c.nsocksPerPeer = 2;
      c.p2pEagerBytes = eagerBytes;
    });
  }
}

TEST(P2P, OrderedPerPeerAndTag) { orderedPerPeerAndTag(128 << 10); }
// Every message above 64 bytes goes by rendezvous (ready-to-send, then the
// data after the receiver's clear-to-send), whichever side comes first.
TEST(P2P, OrderedPerPeerAndTagRendezvous) { orderedPerPeerAndTag(64); }

TEST(P2P, RendezvousAnySourceAndLateReceiver) {
  runRanks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int32_t> big(100000);
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // senders announce first
      for (int k = 0; k < 2; ++k) {
        auto w = recv(comm, Communicator::kAnySource, 9, big.data(), big.size(), DataType::kInt32);
        w->wait();
        for (int32_t v : big) ASSERT_EQ(v, w->sourceRank() * 1000 + 7);
      }
    } else {
      std::fill(big.begin(), big.end(), r * 1000 + 7);
      send(comm, 0, 9, big.data(), big.size(), DataType::kInt32)->wait();
    }
  }, [](CommConfig& c) { c.p2pEagerBytes = 1024; });
}

TEST(P2P, AnySourceReportsTheSender) {
  runRanks(4, [&](Communicator& comm) {
    const int r = comm.rank();
    if (r == 0) {
      std::vector<int64_t> got(3, -1);
      std::vector<int> seen;
      for (int k = 0; k < 3; ++k) {
        auto w = recv(comm, Communicator::kAnySource, 3, &got[static_cast<size_t>(k)], 1, DataType::kInt64);
        w->wait();
        int src = w->sourceRank();
        ASSERT_GE(src, 1);
        ASSERT_EQ(got[static_cast<size_t>(k)], src * 11);
        seen.push_back(src);
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
    } else {
      int64_t v = r * 11;
      send(comm, 0, 3, &v, 1, DataType::kInt64)->wait();
    }
  });
}

TEST(P2P, SubsetThenCollective) {
  runRanks(5, [&](Communicator& comm) {
    const int r = comm.rank();
    // Only ranks 1 and 3 talk, many times, before everyone runs collectives.
    for (int k = 0; k < 10; ++k) {
      float v = static_cast<float>(k);
      if (r == 1) send(comm, 3, static_cast<uint32_t>(k), &v, 1, DataType::kFloat32)->wait();
      if (r == 3) {
        float got = -1;
        recv(comm, 1, static_cast<uint32_t>(k), &got, 1, DataType::kFloat32)->wait();
        ASSERT_EQ(got, v);
      }
    }
    for (int k = 0; k < 3; ++k) {
      double x = r + 1;
      AllreduceOptions o;
      o.buf = &x;
      o.count = 1;
      o.dtype = DataType::kFloat64;
      allreduce(comm, o)->wait();
      ASSERT_EQ(x, 15.0);
    }
  });
}

TEST(P2P, SizeMismatchNamesBothSides) {
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> buf(10, 1.0f);
    if (comm.rank() == 0) {
      // The receiver fails the group on the mismatch. The send may be done
      // before that, or fail with it: by reference (same-host reads) it is
      // done only once the receiver has copied, which it never does here.
      try {
        send(comm, 1, 0, buf.data(), 10, DataType::kFloat32)->wait();
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("to rank 1"), std::string::npos) << e.what();
      }
      return;
    }
    try {
      recv(comm, 0, 0, buf.data(), 5, DataType::kFloat32)->wait();
      ADD_FAILURE() << "expected a mismatch error";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << m;
      EXPECT_NE(m.find("send/recv mismatch"), std::string::npos) << m;
      EXPECT_NE(m.find("10 x float32 (40 bytes)"), std::string::npos) << m;
      EXPECT_NE(m.find("5 x float32 (20 bytes)"), std::string::npos) << m;
    }
  });
}

// A large send waits for the receiver's clear-to-send. If this rank shuts
// its group down (or shrinks it) first, no clear-to-send can come: the
// send fails, naming the shutdown, instead of waiting forever.
TEST(P2P, AnnouncedSendFailsWhenTheGroupShutsDown) {
  std::atomic<bool> over{false}, announced{false};
  runRanks(3, [&](Communicator& comm) {
    std::vector<int32_t> big(4096, comm.rank());
    if (comm.rank() == 0) {
      auto work = send(comm, 1, 4, big.data(), big.size(), DataType::kInt32);  // never received
      comm.shutdown();
      try {
        work->wait(std::chrono::milliseconds(10000));
        ADD_FAILURE() << "a send nobody received completed";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos) << e.what();
      }
      over = true;
      return;
    }
    if (comm.rank() == 2) {
      // Shrinking retires the group: its announced send fails the same way.
      while (!over.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      // Its announcement is on the wire when send() returns (rank 1 shrinks after that).
      auto work = send(comm, 1, 5, big.data(), big.size(), DataType::kInt32);
      announced = true;
      auto child = comm.shrink({0}, false, "without 0");
      try {
        work->wait(std::chrono::milliseconds(10000));
        ADD_FAILURE() << "a send of a retired group completed";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("retired by shrink_group"), std::string::npos) << e.what();
      }
      child->shutdown();
      return;
    }
    while (!announced.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto child = comm.shrink({0}, false, "without 0");
    child->shutdown();
  }, [](CommConfig& c) { c.p2pEagerBytes = 1024; });
}

// A receive posted after its message arrived, with the wrong size, is
// refused before anything changes: a receive that fits gets the message.
TEST(P2P, MismatchedReceiveOfAnArrivedMessageLeavesItForOneThatFits) {
  for (int any : {0, 1}) {
    runRanks(2, [&](Communicator& comm) {
      std::vector<float> buf(10);
      for (int i = 0; i < 10; ++i) buf[static_cast<size_t>(i)] = 3.0f * static_cast<float>(i) + 1.0f;
      if (comm.rank() == 0) {
        send(comm, 1, 6, buf.data(), 10, DataType::kFloat32)->wait();
        barrier(comm)->wait();
        return;
      }
      // Wait until the message is here (buffered as unexpected).
      while (comm.unexpectedBytes() < 40) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const int from = any ? Communicator::kAnySource : 0;
      std::vector<float> got(10, -1.0f);
      try {
        recv(comm, from, 6, got.data(), 5, DataType::kFloat32)->wait();
        ADD_FAILURE() << "a receive of 5 floats took a message of 10";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
        EXPECT_NE(std::string(e.what()).find("10 x float32 (40 bytes)"), std::string::npos) << e.what();
      }
      recv(comm, from, 6, got.data(), 10, DataType::kFloat32)->wait();
      for (int i = 0; i < 10; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], 3.0f * static_cast<float>(i) + 1.0f);
      barrier(comm)->wait();
    });
  }
}

TEST(P2P, BadPeerIsAUsageError) {
  runRanks(2, [&](Communicator& comm) {
    int v = 0;
    EXPECT_THROW(send(comm, 5, 0, &v, 1, DataType::kInt32), Error);
    EXPECT_THROW(send(comm, comm.rank(), 0, &v, 1, DataType::kInt32), Error);
    EXPECT_THROW(recv(comm, -7, 0, &v, 1, DataType::kInt32), Error);
  });
}

}  // namespace
}  // namespace mccl::test
