// Failures are detected and reported with both sides named: mismatched
// collectives, timeouts, aborts; after a failure every later op fails fast.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "comm/abort_relay.h"
#include "comm/peer_probe.h"
#include "harness.h"

namespace mccl::test {
namespace {

// Runs one op per rank and expects every rank to see a failure with `kind`
// and a message containing all `needles`: in that op, or (for ranks that
// finished their part before the mismatch was seen elsewhere) in the next
// op, once the ABORT has reached them. Ranks stay alive until all have seen
// it, as processes blocked in a job would.
void expectAllFail(int n, const std::function<std::shared_ptr<Work>(Communicator&)>& op,
                   ErrorKind kind, std::vector<std::string> needles) {
  std::atomic<int> seen{0};
  runRanks(n, [&](Communicator& comm) {
    double x = 1;
    AllreduceOptions next;
    next.buf = &x;
    next.count = 1;
    next.dtype = DataType::kFloat64;
    std::optional<Error> got;
    try {
      op(comm)->wait();
      allreduce(comm, next)->wait();
    } catch (const Error& e) {
      got = e;
    }
    seen.fetch_add(1);
    ASSERT_TRUE(got.has_value()) << "rank " << comm.rank() << ": expected a failure";
    std::string m = got->what();
    EXPECT_EQ(got->kind(), kind) << "rank " << comm.rank() << ": " << m;
    for (const auto& s : needles) EXPECT_NE(m.find(s), std::string::npos) << "rank " << comm.rank() << ": " << m;
    // The group is poisoned: later calls fail at once with the cause.
    auto start = Clock::now();
    EXPECT_THROW(allreduce(comm, next)->wait(), Error);
    EXPECT_LT(secondsSince(start), 1.0);
    while (seen.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }, [](CommConfig& c) { c.timeout = std::chrono::seconds(20); });
}

std::shared_ptr<Work> allreduceOf(Communicator& comm, std::vector<float>& buf, ReduceOp op = ReduceOp::kSum) {
  AllreduceOptions o;
  o.buf = buf.data();
  o.count = buf.size();
  o.dtype = DataType::kFloat32;
  o.op = op;
  return allreduce(comm, o);
}

TEST(Mismatch, ElementCount) {
  std::vector<std::vector<float>> bufs = {std::vector<float>(100), std::vector<float>(99), std::vector<float>(100)};
  expectAllFail(3, [&](Communicator& comm) { return allreduceOf(comm, bufs[static_cast<size_t>(comm.rank())]); },
                ErrorKind::kUsage, {"disagree", "count="});
}

TEST(Mismatch, OpKind) {
  std::vector<std::vector<float>> bufs(2, std::vector<float>(16));
  expectAllFail(2, [&](Communicator& comm) -> std::shared_ptr<Work> {
    auto& b = bufs[static_cast<size_t>(comm.rank())];
    if (comm.rank() == 0) return allreduceOf(comm, b);
    BroadcastOptions o{b.data(), b.size(), DataType::kFloat32, 0};
    return broadcast(comm, o);
  }, ErrorKind::kUsage, {"disagree", "allreduce(", "broadcast("});
}

TEST(Mismatch, ReduceOpAndDtype) {
  std::vector<std::vector<float>> bufs(2, std::vector<float>(16));
  expectAllFail(2, [&](Communicator& comm) {
    return allreduceOf(comm, bufs[static_cast<size_t>(comm.rank())], comm.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax);
  }, ErrorKind::kUsage, {"reduce op differs", "op=SUM", "op=MAX"});
  std::vector<std::vector<double>> d(2, std::vector<double>(16));
  expectAllFail(2, [&](Communicator& comm) {
    AllreduceOptions o;
    o.buf = d[static_cast<size_t>(comm.rank())].data();
    o.count = comm.rank() == 0 ? 16 : 8;
    o.dtype = comm.rank() == 0 ? DataType::kFloat32 : DataType::kFloat64;
    return allreduce(comm, o);
  }, ErrorKind::kUsage, {"dtype and element count differ"});
}

TEST(Mismatch, Root) {
  std::vector<std::vector<int32_t>> bufs(3, std::vector<int32_t>(5));
  expectAllFail(3, [&](Communicator& comm) {
    BroadcastOptions o{bufs[static_cast<size_t>(comm.rank())].data(), 5, DataType::kInt32, comm.rank() == 2 ? 1 : 0};
    return broadcast(comm, o);
  }, ErrorKind::kUsage, {"root differs"});
}

TEST(Timeout, SilentPeerFailsAtTheOpDeadline) {
  runRanks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      // Never joins the collective; waits for rank 0's ABORT instead.
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      EXPECT_TRUE(comm.poisoned());
      return;
    }
    std::vector<float> b(8);
    AllreduceOptions o;
    o.buf = b.data();
    o.count = b.size();
    o.dtype = DataType::kFloat32;
    o.timeout = std::chrono::milliseconds(300);
    auto start = Clock::now();
    try {
      allreduce(comm, o)->wait();
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      double took = secondsSince(start);
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
      EXPECT_GE(took, 0.29);
      EXPECT_LT(took, 1.5);
      std::string m = e.what();
      EXPECT_NE(m.find("timed out"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    }
  });
}

// The torus serves its flows by waiting for any transfer: a timeout still
// names the transfer it expected first. On a 2 x 2 grid rank 3 never joins;
// rank 1 (row {0, 1}, column {1, 3}) finishes its row's reduce-scatter and
// then waits for its column's, from rank 3. The other ranks wait longer so
// rank 1's own deadline fires first.
TEST(Timeout, TorusNamesTheTransferItWaitsFor) {
  runRanks(4, [&](Communicator& comm) {
    if (comm.rank() == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    std::vector<float> b(4096, 1.0f);
    AllreduceOptions o;
    o.buf = b.data();
    o.count = b.size();
    o.dtype = DataType::kFloat32;
    o.timeout = std::chrono::milliseconds(comm.rank() == 1 ? 300 : 2000);
    try {
      allreduce(comm, o)->wait();
      ADD_FAILURE() << "expected a failure";
    } catch (const Error& e) {
      if (comm.rank() != 1) return;
      std::string m = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << m;
      EXPECT_NE(m.find("waiting for the receive of allreduce"), std::string::npos) << m;
      EXPECT_NE(m.find("from rank 3"), std::string::npos) << m;
    }
  }, [](CommConfig& c) { c.algo = "allreduce=torus"; });
}

// A store whose waits last `wait(timeout)` instead of `timeout`: cut short,
// or late (a store across a slow network).
class ClockedStore : public MemoryStore {
 public:
  using Wait = std::function<std::chrono::milliseconds(std::chrono::milliseconds)>;
  explicit ClockedStore(Wait wait) : wait_(std::move(wait)) {}
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return MemoryStore::get(key, wait_(timeout));
  }

 private:
  Wait wait_;
};

// A rank that never made its communicator (its process died before) never
// published its address: an op that must send to it fails naming that, not
// "its next transfer" of "the peer", whether the store's wait for the
// address ends first or the op's deadline.
void expectNamesTheUnpublishedPeer(std::shared_ptr<Store> store, const std::string& needle) {
  Watchdog dog(std::chrono::seconds(60), "NamesAPeerThatNeverPublishedItsAddress");
  auto comm = Communicator::create(store, baseConfig(0, 2));
  int32_t v = 7;
  BroadcastOptions o{&v, 1, DataType::kInt32, 0};
  o.timeout = std::chrono::milliseconds(400);
  auto start = Clock::now();
  try {
    broadcast(*comm, o)->wait();
    ADD_FAILURE() << "expected a timeout";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << m;
    EXPECT_NE(m.find("broadcast("), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_NE(m.find("(that rank never joined this group, or it died before it did)"), std::string::npos) << m;
    EXPECT_EQ(m.find("its next transfer"), std::string::npos) << m;
  }
  EXPECT_LT(secondsSince(start), 2.0);
  comm->abort();
}

TEST(Timeout, NamesAPeerThatNeverPublishedItsAddress) {
  using std::chrono::milliseconds;
  // The store's wait ends first...
  expectNamesTheUnpublishedPeer(std::make_shared<ClockedStore>([](milliseconds t) { return t / 4; }),
                                "the address of rank 1 is not in the store");
  // ...or the op's deadline.
  expectNamesTheUnpublishedPeer(std::make_shared<ClockedStore>([](milliseconds t) { return t + milliseconds(600); }),
                                "waiting for the address of rank 1, which is not in the store");
}

TEST(Timeout, QueueTimeDoesNotCount) {
  // Rank 0 submits A and B at once, one op on the wire at a time, each with
  // a 1 s timeout. Rank 1 joins A at 0.6 s and B at 1.3 s: B waits 0.6 s in
  // the queue and then 0.7 s on the wire. It must succeed; counting its queue
  // time would fail it at 1.0 s.
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> a(8, 1.0f), b(8, 2.0f);
    auto opts = [&](std::vector<float>& v) {
      AllreduceOptions o;
      o.buf = v.data();
      o.count = v.size();
      o.dtype = DataType::kFloat32;
      o.timeout = std::chrono::milliseconds(1000);
      return o;
    };
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      allreduce(comm, opts(a))->wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      allreduce(comm, opts(b))->wait();
    } else {
      auto wa = allreduce(comm, opts(a));
      auto wb = allreduce(comm, opts(b));
      wa->wait();
      wb->wait();
    }
    EXPECT_EQ(a[0], 2.0f);
    EXPECT_EQ(b[0], 4.0f);
  }, [](CommConfig& c) { c.inflightOps = 1; });
}

TEST(Abort, PeersFailFastWithTheCause) {
  runRanks(3, [&](Communicator& comm) {
    if (comm.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.abort();
      return;
    }
    std::vector<float> b(8);
    auto start = Clock::now();
    try {
      allreduceOf(comm, b)->wait();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_LT(secondsSince(start), 5.0);
      std::string m = e.what();
      EXPECT_NE(m.find("abort"), std::string::npos) << m;
    }
  });
}

// Ranks that only wait to receive from the failed rank have no connection
// to anyone: the ABORT is relayed to them (abort_relay.h) instead of leaving
// them to their op's timeout (20 s here).
void expectRelayedAbort(int n, int quitter) {
  runRanks(n, [&](Communicator& comm) {
    if (comm.rank() == quitter) return;  // shuts down at once: the relay passes it over
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort();
      return;
    }
    int32_t v = -1;
    auto start = Clock::now();
    try {
      recv(comm, 0, 7, &v, 1, DataType::kInt32)->wait();
      ADD_FAILURE() << "rank " << comm.rank() << ": expected an error";
    } catch (const Error& e) {
      EXPECT_LT(secondsSince(start), 5.0) << "rank " << comm.rank() << ": " << e.what();
      std::string m = e.what();
      EXPECT_NE(m.find("aborted the group"), std::string::npos) << "rank " << comm.rank() << ": " << m;
    }
    EXPECT_EQ(v, -1);
  }, [](CommConfig& c) { c.timeout = std::chrono::seconds(20); });
}

TEST(Abort, ReachesRanksWithNoConnection) { expectRelayedAbort(3, -1); }

TEST(Abort, RelayPassesOverAMemberThatShutDown) { expectRelayedAbort(4, 1); }

// A rank waiting for data from a peer that died before it ever connected
// has no connection to see the death on: it probes the peer after a second
// (peer_probe.h) instead of waiting out the op's timeout (20 s here).
TEST(Probe, WaitingForAPeerThatIsGoneFailsFastNamingIt) {
  runRanks(3, [&](Communicator& comm) {
    if (comm.rank() == 1) return;  // gone before it sent anything
    std::vector<float> b(5, static_cast<float>(comm.rank()));
    auto start = Clock::now();
    try {
      if (comm.rank() == 2) {
        int32_t v = -1;
        recv(comm, 1, 3, &v, 1, DataType::kInt32)->wait();
      } else {
        BroadcastOptions o{b.data(), b.size(), DataType::kFloat32, 1};  // root: rank 1
        broadcast(comm, o)->wait();
      }
      ADD_FAILURE() << "rank " << comm.rank() << ": expected an error";
    } catch (const Error& e) {
      EXPECT_LT(secondsSince(start), 6.0) << "rank " << comm.rank() << ": " << e.what();
      std::string m = e.what();
      EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    }
  }, [](CommConfig& c) { c.timeout = std::chrono::seconds(20); });
}

TEST(Probe, ASlowSenderIsNotTakenForDead) {
  runRanks(3, [&](Communicator& comm) {
    std::vector<double> b(7, comm.rank() == 0 ? 42.0 : -1.0);
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    BroadcastOptions o{b.data(), b.size(), DataType::kFloat64, 0};
    broadcast(comm, o)->wait();
    for (double x : b) EXPECT_EQ(x, 42.0);
    int32_t v = comm.rank() == 0 ? 7 : -1;
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      send(comm, 2, 4, &v, 1, DataType::kInt32)->wait();
    } else if (comm.rank() == 2) {
      recv(comm, 0, 4, &v, 1, DataType::kInt32)->wait();
      EXPECT_EQ(v, 7);
    }
  }, [](CommConfig& c) { c.timeout = std::chrono::seconds(20); });
}

// The relay on its own: it stops at the first rank reached, goes on past it
// when that rank turns out lost, and finish() does not wait while it is
// parked.
TEST(AbortRelayUnit, GoesOnPastARankThatTurnsOutLost) {
  AbortRelay relay;
  std::mutex mu;
  std::vector<int> asked;
  relay.start({1, 2, 3, 0}, std::chrono::milliseconds(100), [&](int r, Deadline) {
    std::lock_guard<std::mutex> lock(mu);
    asked.push_back(r);
    return r != 2;  // rank 2 cannot be reached
  });
  auto waitTried = [&](size_t n) {
    for (int i = 0; i < 500 && relay.tried().size() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return relay.tried();
  };
  EXPECT_EQ(waitTried(1), std::vector<int>({1}));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(relay.tried(), std::vector<int>({1})) << "it went on past a rank it reached";
  relay.lost(1);  // rank 1's link failed after all
  EXPECT_EQ(waitTried(3), std::vector<int>({1, 2, 3}));
  relay.lost(0);  // a rank not reached yet is skipped when its turn comes
  relay.lost(3);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(relay.tried(), std::vector<int>({1, 2, 3}));
  auto start = Clock::now();
  relay.finish(Deadline::after(std::chrono::seconds(5)));
  EXPECT_LT(secondsSince(start), 1.0);
}

TEST(PeerProbeUnit, ProbesEachPeerOnceAfterTheDelayAndOnlyIfStillNeeded) {
  std::mutex mu;
  std::vector<int> dialled;
  std::atomic<bool> need3{true};
  PeerProbe probe(4, std::chrono::milliseconds(100), std::chrono::milliseconds(100),
                  [&](int r) { return r != 3 || need3.load(); },
                  [&](int r, Deadline) {
                    std::lock_guard<std::mutex> lock(mu);
                    dialled.push_back(r);
                    return true;
                  });
  auto start = Clock::now();
  probe.expect(1);
  probe.expect(1);
  probe.expect(3);
  need3 = false;  // rank 3 connected meanwhile
  for (int i = 0; i < 500 && probe.dialled() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(secondsSince(start), 0.09);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(dialled, std::vector<int>({1}));
  }
  probe.expect(2);  // after the thread went idle: a new one probes it
  for (int i = 0; i < 500 && probe.dialled() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  probe.finish();
  probe.expect(0);  // after finish: nothing
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(dialled, std::vector<int>({1, 2}));
}

// A dial that proves nothing (a dropped handshake, a timeout) is dialled
// again after the delay, while the probe is needed and up to kMaxDials
// times; one that settles it is not.
TEST(PeerProbeUnit, DialsAgainUntilADialSettlesIt) {
  std::mutex mu;
  std::vector<int> dialled;
  std::atomic<bool> need2{true};
  PeerProbe probe(4, std::chrono::milliseconds(20), std::chrono::milliseconds(100),
                  [&](int r) { return r != 2 || need2.load(); },
                  [&](int r, Deadline) {
                    std::lock_guard<std::mutex> lock(mu);
                    dialled.push_back(r);
                    const auto n = std::count(dialled.begin(), dialled.end(), r);
                    if (r == 1) return n == 3;  // settled by its third dial
                    if (r == 2 && n == 2) need2 = false;  // connected after its second
                    return false;                          // rank 3 never settles
                  });
  probe.expect(1);
  probe.expect(2);
  probe.expect(3);
  for (int i = 0; i < 1000 && probe.dialled() < 3 + 2 + PeerProbe::kMaxDials; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no more than that
  probe.finish();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(std::count(dialled.begin(), dialled.end(), 1), 3);
  EXPECT_EQ(std::count(dialled.begin(), dialled.end(), 2), 2);
  EXPECT_EQ(std::count(dialled.begin(), dialled.end(), 3), PeerProbe::kMaxDials);
}

TEST(PeerShutdown, PendingOpFailsFastNamingThePeer) {
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> b(8);
    allreduceOf(comm, b)->wait();  // connected both ways
    if (comm.rank() == 1) return;  // shuts down cleanly while rank 0 waits
    auto start = Clock::now();
    try {
      allreduceOf(comm, b)->wait();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_LT(secondsSince(start), 5.0);
      std::string m = e.what();
      EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
      EXPECT_NE(m.find("has shut down"), std::string::npos) << m;
    }
  });
}

// A peer that sends and shuts down at once, over a connection this rank's
// listener has not yet handed to the group: its goodbye on the connections
// already here must not end the peer while data is still on the late one.
TEST(PeerShutdown, GoodbyeWaitsForConnectionsNotYetAdopted) {
  const int msgs = 6;
  runRanks(2, [&](Communicator& comm) {
    std::vector<std::shared_ptr<Work>> works;
    std::vector<int32_t> vals(msgs, -1);
    for (int m = 0; m < msgs; ++m) {
      vals[static_cast<size_t>(m)] = comm.rank() == 0 ? 1000 + m : -1;
      works.push_back(comm.rank() == 0 ? send(comm, 1, 5, &vals[static_cast<size_t>(m)], 1, DataType::kInt32)
                                       : recv(comm, 0, 5, &vals[static_cast<size_t>(m)], 1, DataType::kInt32));
    }
    for (auto& w : works) w->wait();  // rank 0 shuts down right after its sends leave
    for (int m = 0; m < msgs; ++m) EXPECT_EQ(vals[static_cast<size_t>(m)], 1000 + m);
  }, [](CommConfig& c) {
    c.nsocksPerPeer = 3;  // rank 0 spreads its frames over three connections
    c.localReadBytes = 0;
    if (c.rank == 1) c.adoptDelayForTesting = std::chrono::milliseconds(150);
  });
}

TEST(Usage, BadArgumentsBeforeAnyTraffic) {
  runRanks(2, [&](Communicator& comm) {
    std::vector<float> b(4);
    AllreduceOptions o;
    o.buf = b.data();
    o.count = 4;
    o.dtype = DataType::kFloat32;
    o.op = ReduceOp::kBXor;
    try {
      allreduce(comm, o);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      EXPECT_NE(std::string(e.what()).find("BXOR is not supported for dtype float32"), std::string::npos) << e.what();
    }
    BroadcastOptions bo{b.data(), 4, DataType::kFloat32, 2};
    EXPECT_THROW(broadcast(comm, bo), Error);
    AllgatherOptions ag;
    ag.in = b.data();
    ag.out = {b.data()};
    ag.count = 1;
    EXPECT_THROW(allgather(comm, ag), Error);
    // The group is still healthy: validation failures send nothing.
    EXPECT_FALSE(comm.poisoned());
    o.op = ReduceOp::kSum;
    allreduce(comm, o)->wait();
  });
}

}  // namespace
}  // namespace mccl::test
