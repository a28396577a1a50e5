// Every collective and algorithm on 1, 2, 3, 4, 5 and 7 ranks (threads over
// loopback), counts 0, 1 and primes, every dtype, distinct data per rank,
// checked against float64 / exact-integer references on every rank.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>

#include "algo/model.h"
#include "harness.h"
#include "typed.h"

namespace mccl::test {
namespace {

const std::vector<int> kWorlds = {1, 2, 3, 4, 5, 7};
const std::vector<size_t> kCounts = {0, 1, 2, 13, 1031};

std::vector<DataType> allDtypes() {
  std::vector<DataType> v;
  for (int d = 0; d < kNumDataTypes; ++d) v.push_back(static_cast<DataType>(d));
  return v;
}

// Small chunks and frames so that small test buffers still run many-chunk
// pipelines, striped over several sockets, with a tight unexpected budget.
void pipelined(CommConfig& c) {
  c.chunkBytes = 4096;
  c.frameBytes = 4096;
  c.unexpectedBytes = 3 * 4096;
  c.nsocksPerPeer = 3;
}

std::string where(Communicator& comm, const char* what, DataType dt, ReduceOp op, size_t count,
                  size_t i) {
  return strCat(what, " rank ", comm.rank(), "/", comm.size(), " ", dtypeName(dt), " ",
                reduceOpName(op), " count ", count, " at ", i);
}

void checkAllreduce(Communicator& comm, DataType dt, ReduceOp op, size_t count, int salt) {
  Buffer buf(dt, count), want(dt, count);
  const double premul = 0.5;
  for (size_t i = 0; i < count; ++i) {
    buf.set(i, value(dt, op, comm.rank(), i, salt));
    want.set(i, reference(dt, op, comm.size(), i, salt, premul));
  }
  AllreduceOptions o;
  o.buf = buf.data();
  o.count = count;
  o.dtype = dt;
  o.op = op;
  o.premulFactor = premul;
  allreduce(comm, o)->wait();
  for (size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(close(dt, op, buf.at(i), want.at(i)))
        << where(comm, "allreduce", dt, op, count, i) << ": got " << buf.at(i) << " want "
        << want.at(i);
  }
}

void allreduceSweep(const std::string& algo, const ConfigFn& extra = nullptr) {
  for (int n : kWorlds) {
    runRanks(n, [&](Communicator& comm) {
      int salt = 0;
      for (DataType dt : allDtypes()) {
        for (int o = 0; o < kNumReduceOps; ++o) {
          ReduceOp op = static_cast<ReduceOp>(o);
          if (!reduceSupported(dt, op)) continue;
          for (size_t count : kCounts) checkAllreduce(comm, dt, op, count, ++salt);
        }
      }
      checkAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, 100003, 1);
      checkAllreduce(comm, DataType::kBFloat16, ReduceOp::kMax, 50021, 2);
    }, [&](CommConfig& c) {
      c.algo = algo;
      if (extra) extra(c);
    });
  }
}

// float32 values whose sum depends on the order of addition (every third
// rank's are 1e7 times larger): algorithms that must give every rank the
// same bits are checked with these.
float orderSensitive(int rank, size_t i) {
  return (rank % 3 == 0 ? 1e7f : 1.0f) * static_cast<float>((rank * 7 + static_cast<int>(i)) % 11) / 3.0f;
}

// All-reduces `count` such values of this rank and returns the result.
std::vector<float> allreduceOrderSensitive(Communicator& comm, size_t count) {
  std::vector<float> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = orderSensitive(comm.rank(), i);
  AllreduceOptions o;
  o.buf = mine.data();
  o.count = count;
  allreduce(comm, o)->wait();
  return mine;
}

// Every rank's result equals rank 0's, bit for bit.
void expectBitIdentical(const std::vector<std::vector<float>>& got) {
  for (size_t r = 1; r < got.size(); ++r) {
    ASSERT_EQ(std::memcmp(got[r].data(), got[0].data(), got[0].size() * sizeof(float)), 0)
        << "rank " << r << " of " << got.size() << " differs from rank 0";
  }
}

TEST(Allreduce, Ring) { allreduceSweep("allreduce=ring"); }
TEST(Allreduce, RingPipelinedStriped) { allreduceSweep("allreduce=ring", pipelined); }
TEST(Allreduce, RecursiveDoubling) { allreduceSweep("allreduce=recursive_doubling"); }
TEST(Allreduce, Direct) { allreduceSweep("allreduce=direct"); }
TEST(Allreduce, Bruck) { allreduceSweep("allreduce=bruck"); }

// A cost model under which bruckRadix picks radix k on n ranks for small
// buffers: per-message CPU cost against latency decides between more rounds
// (k = 2) and more messages per round (k = n: the direct exchange).
CostModel radixModel(int k, int n) {
  for (double alpha : {0.0, 1.0, 3.0, 10.0, 20.0, 30.0, 60.0, 100.0, 300.0, 1e4}) {
    CostModel m{.alphaUs = alpha, .overheadUs = 10.0, .betaNsPerByte = 0.8, .gammaNsPerByte = 0.1};
    if (algo::bruckRadix(m, 8, n) == k) return m;
  }
  ADD_FAILURE() << "no model picks radix " << k << " on " << n << " ranks";
  return CostModel{};
}

// Bruck's radix from 2 (log2 n rounds) to n (one round), on odd, prime and
// large groups: exact against the references, and float32 sums bit-identical
// on every rank to the fold in rank order (what the direct exchange gives).
TEST(Allreduce, BruckEveryRadixOnLargeGroups) {
  struct Case {
    int n, k;
  };
  for (Case c : std::vector<Case>{{2, 2}, {3, 3}, {5, 2}, {7, 3}, {12, 2}, {12, 12}, {17, 2}, {17, 3},
                                  {17, 17}, {33, 2}, {33, 4}, {64, 2}, {64, 4}}) {
    CostModel m = radixModel(c.k, c.n);
    runRanks(c.n, [&](Communicator& comm) {
      ASSERT_EQ(algo::bruckRadix(comm.model(), 8, comm.size()), c.k);
      int salt = 0;
      for (DataType dt : {DataType::kInt64, DataType::kFloat64, DataType::kFloat16, DataType::kBool}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          if (!reduceSupported(dt, op)) continue;
          for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{13}}) checkAllreduce(comm, dt, op, count, ++salt);
        }
      }
      // float32 values whose sum depends on the order: every rank must hold
      // the rank-order fold, bit for bit.
      const size_t count = 7;
      std::vector<float> want(count);
      for (size_t i = 0; i < count; ++i) {
        float acc = orderSensitive(0, i);
        for (int r = 1; r < comm.size(); ++r) acc += orderSensitive(r, i);
        want[i] = acc;
      }
      std::vector<float> mine = allreduceOrderSensitive(comm, count);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(std::memcmp(&mine[i], &want[i], sizeof(float)), 0)
            << "rank " << comm.rank() << "/" << comm.size() << " k " << c.k << " at " << i << ": "
            << mine[i] << " want " << want[i];
      }
    }, [&](CommConfig& cfg) {
      cfg.algo = "allreduce=bruck";
      cfg.model = m;
    }, std::chrono::seconds(300));
  }
}
// Recursive doubling on every number of leaders the cost model can pick
// (blocks of 1 to 64 ranks folded into each leader), on odd, prime and large
// groups: exact against the references, and float32 sums whose value
// depends on the order bit-identical on every rank.
TEST(Allreduce, RecursiveDoublingEveryLeaderCount) {
  struct Case {
    int n, p;
  };
  for (Case c : std::vector<Case>{{2, 2}, {3, 1}, {3, 2}, {5, 1}, {5, 2}, {5, 4}, {7, 2}, {12, 4},
                                  {12, 8}, {17, 1}, {17, 16}, {24, 4}, {24, 8}, {24, 16}, {33, 2},
                                  {33, 32}, {48, 16}, {64, 1}, {64, 64}}) {
    CostModel m;
    bool found = false;
    for (double alpha : {0.0, 1.0, 3.0, 10.0, 20.0, 30.0, 60.0, 100.0, 300.0, 1e3, 1e4}) {
      for (double o : {1.0, 3.0, 10.0, 33.0, 100.0}) {
        CostModel t{.alphaUs = alpha, .overheadUs = o, .betaNsPerByte = 0.8, .gammaNsPerByte = 0.1};
        if (!found && algo::rdLeaders(t, 8, c.n) == c.p) {
          m = t;
          found = true;
        }
      }
    }
    ASSERT_TRUE(found) << "no model picks " << c.p << " leaders on " << c.n << " ranks";
    std::vector<std::vector<float>> got(static_cast<size_t>(c.n));
    runRanks(c.n, [&](Communicator& comm) {
      ASSERT_EQ(algo::rdLeaders(comm.model(), 8, comm.size()), c.p);
      int salt = 0;
      for (DataType dt : {DataType::kInt64, DataType::kFloat64, DataType::kBFloat16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          if (!reduceSupported(dt, op)) continue;
          for (size_t count : {size_t{0}, size_t{1}, size_t{13}}) checkAllreduce(comm, dt, op, count, ++salt);
        }
      }
      got[static_cast<size_t>(comm.rank())] = allreduceOrderSensitive(comm, 2);
    }, [&](CommConfig& cfg) {
      cfg.algo = "allreduce=recursive_doubling";
      cfg.model = m;
    }, std::chrono::seconds(300));
    expectBitIdentical(got);
  }
}
TEST(Allreduce, Rabenseifner) { allreduceSweep("allreduce=rabenseifner"); }
TEST(Allreduce, RabenseifnerPipelined) { allreduceSweep("allreduce=rabenseifner", pipelined); }

// `algo` forced on n thread ranks with 4 KiB chunks (several per step where
// blocks are large): int64, float64 and bfloat16 sums, maxima and averages
// of 0, 1, 13 and 1031 elements exact against the references, and 4099
// float32 order-sensitive values summed bit-identically on every rank.
void exactAndBitIdentical(const std::string& algo, int n) {
  std::vector<std::vector<float>> got(static_cast<size_t>(n));
  runRanks(n, [&](Communicator& comm) {
    int salt = 0;
    for (DataType dt : {DataType::kInt64, DataType::kFloat64, DataType::kBFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        if (!reduceSupported(dt, op)) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{1031}}) checkAllreduce(comm, dt, op, count, ++salt);
      }
    }
    got[static_cast<size_t>(comm.rank())] = allreduceOrderSensitive(comm, 4099);
  }, [&](CommConfig& cfg) {
    cfg.algo = algo;
    cfg.chunkBytes = 4096;
  }, std::chrono::seconds(300));
  expectBitIdentical(got);
}

// Recursive halving and doubling on large, odd, prime and power-of-two
// groups (the fold of 1 to 31 extra ranks): exact against the references,
// and float32 sums whose value depends on the order bit-identical on every
// rank (each block is summed by one owner and copied).
TEST(Allreduce, RabenseifnerOnLargeGroups) {
  for (int n : {8, 9, 16, 17, 24, 33, 48, 64}) exactAndBitIdentical("allreduce=rabenseifner", n);
}
TEST(Allreduce, RecursiveMultiplying) { allreduceSweep("allreduce=recursive_multiplying"); }

// Groups of 2, 3, 5 and 7 per round on large, odd and prime groups (a prime
// above 7 folds onto a smaller base): exact against the references, and
// float32 sums whose value depends on the order bit-identical on every rank.
TEST(Allreduce, RecursiveMultiplyingOnLargeGroups) {
  for (int n : {9, 10, 11, 21, 23, 24, 35, 47, 48, 64}) {
    const algo::RadixPlan plan = algo::radixPlan(CostModel{}, 8, n);
    int product = 1;
    for (int q : plan.factors) product *= q;
    ASSERT_EQ(product, plan.base) << n;
    ASSERT_LE(2 * (n - plan.base), n) << n;
    if (n == 11 || n == 23 || n == 47) {
      ASSERT_LT(plan.base, n) << "a prime above 7 folds";
    }
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    runRanks(n, [&](Communicator& comm) {
      ASSERT_EQ(algo::radixPlan(comm.model(), 8, comm.size()).factors, plan.factors);
      int salt = 0;
      for (DataType dt : {DataType::kInt64, DataType::kFloat64, DataType::kFloat16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          if (!reduceSupported(dt, op)) continue;
          for (size_t count : {size_t{0}, size_t{1}, size_t{13}}) checkAllreduce(comm, dt, op, count, ++salt);
        }
      }
      got[static_cast<size_t>(comm.rank())] = allreduceOrderSensitive(comm, 7);
    }, [&](CommConfig& cfg) {
      cfg.algo = "allreduce=recursive_multiplying";
      cfg.model = CostModel{};  // the built-in one, whatever tune file this machine has
    }, std::chrono::seconds(300));
    expectBitIdentical(got);
  }
}
TEST(Allreduce, Torus) { allreduceSweep("allreduce=torus"); }
TEST(Allreduce, TorusPipelined) { allreduceSweep("allreduce=torus", pipelined); }

// The two-dimensional all-reduce on grids of 2 x 4 up to 8 x 8 (24 = 4 x 6,
// 35 = 5 x 7, 48 = 6 x 8) and on primes (one row: the ring's phases): exact against the references, and float32
// sums whose value depends on the order bit-identical on every rank.
TEST(Allreduce, TorusOnLargeGroups) {
  for (int n : {8, 9, 10, 12, 15, 21, 23, 24, 35, 48, 64}) {
    const int a = algo::torusRows(n);
    ASSERT_EQ(n % a, 0) << n;
    ASSERT_LE(a * a, n) << n;
    ASSERT_EQ(algo::hasTorusGrid(n), n != 23) << n;
    exactAndBitIdentical("allreduce=torus", n);  // 4099 floats: two chunks per row step on 8 and 9 ranks
  }
}
// Grids with a != b and b > 2 through the pipelined, striped transport
// with a tight unexpected budget: many chunks in every phase (column phases
// included) and the row all-gather's early arrivals.
TEST(Allreduce, TorusPipelinedOnGrids) {
  for (int n : {6, 8, 9, 12}) {
    runRanks(n, [&](Communicator& comm) {
      int salt = 0;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kPreMulSum, ReduceOp::kMax}) {
        for (size_t count : {size_t{5}, size_t{20011}, size_t{100003}}) {
          checkAllreduce(comm, DataType::kFloat32, op, count, ++salt);
        }
      }
      checkAllreduce(comm, DataType::kInt64, ReduceOp::kSum, 30011, ++salt);
    }, [&](CommConfig& cfg) {
      cfg.algo = "allreduce=torus";
      pipelined(cfg);
    }, std::chrono::seconds(300));
  }
}
// Grids of 4 and 5 rows with 25 chunks per row block: chunks of one rank's
// block cross its column (3-4 steps each way) and its row while the row's
// reduce-scatter still works on later ones. Exact against the references,
// and float32 sums whose value depends on the order bit-identical.
TEST(Allreduce, TorusOverlapsOnTallGrids) {
  for (int n : {16, 20, 25}) {
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    runRanks(n, [&](Communicator& comm) {
      checkAllreduce(comm, DataType::kInt64, ReduceOp::kSum, 100003, 1);
      checkAllreduce(comm, DataType::kFloat32, ReduceOp::kAvg, 100003, 2);
      got[static_cast<size_t>(comm.rank())] = allreduceOrderSensitive(comm, 100003);
    }, [&](CommConfig& cfg) {
      cfg.algo = "allreduce=torus";
      cfg.chunkBytes = 4096;
    }, std::chrono::seconds(300));
    expectBitIdentical(got);
  }
}
#if defined(__linux__)
// Every connection with its congestion control chosen (MCCL_TCP_CONGESTION).
TEST(Allreduce, OverConnectionsWithChosenCongestionControl) {
  allreduceSweep("allreduce=ring", [](CommConfig& c) { c.tcpCongestion = "reno"; });
}
#endif
TEST(Allreduce, Automatic) { allreduceSweep(""); }

// Same-host reads (the ranks are threads of one process, which can always
// read itself): every frame of at least 1 KiB goes by reference, with the
// small-chunk pipeline as well. scripts/test.sh also runs the whole suite
// with MCCL_LOCAL_READ_BYTES=1.
TEST(Allreduce, RingByReference) {
  allreduceSweep("allreduce=ring", [](CommConfig& c) {
    pipelined(c);
    c.localReadBytes = 1024;
  });
}

// Buffers large enough for reductions to be split across helper threads
// (scripts/test.sh runs the suite again with MCCL_REDUCE_THREADS=3).
TEST(Allreduce, LargeBuffersOnTheRing) {
  runRanks(3, [&](Communicator& comm) {
    checkAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, (1 << 20) + 7, 1);
    checkAllreduce(comm, DataType::kBFloat16, ReduceOp::kMax, (1 << 20) + 3, 2);
    checkAllreduce(comm, DataType::kInt64, ReduceOp::kProduct, (1 << 18) + 1, 3);
  }, [](CommConfig& c) { c.algo = "allreduce=ring"; });
}

TEST(Allreduce, ReferencesOnlyWhenLocalReadsAreOn) {
  for (size_t reads : {size_t{0}, size_t{1024}}) {
    runRanks(3, [&](Communicator& comm) {
      for (int k = 0; k < 3; ++k) checkAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, 100003, k);
      if (reads == 0) {
        EXPECT_EQ(comm.refFramesSent(), 0u) << "MCCL_LOCAL_READ_BYTES=0 keeps every byte on TCP";
      } else {
        EXPECT_GT(comm.refFramesSent(), 0u) << "rank " << comm.rank() << " never sent by reference";
      }
    }, [&](CommConfig& c) {
      c.algo = "allreduce=ring";
      c.localReadBytes = reads;
    });
  }
}

TEST(Broadcast, AllAlgorithmsRootsAndCounts) {
  for (std::string algo : {"broadcast=binomial", "broadcast=chain"}) {
    for (int n : kWorlds) {
      runRanks(n, [&](Communicator& comm) {
        int salt = 0;
        for (int root : {0, n - 1, n / 2}) {
          for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16, DataType::kBool}) {
            for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{20011}}) {
              ++salt;
              Buffer buf(dt, count);
              for (size_t i = 0; i < count; ++i) {
                buf.set(i, comm.rank() == root ? value(dt, ReduceOp::kSum, root, i, salt) : 99);
              }
              BroadcastOptions o{buf.data(), count, dt, root};
              broadcast(comm, o)->wait();
              for (size_t i = 0; i < count; ++i) {
                ASSERT_EQ(buf.at(i), value(dt, ReduceOp::kSum, root, i, salt))
                    << where(comm, "broadcast", dt, ReduceOp::kSum, count, i) << " root " << root;
              }
            }
          }
        }
      }, [&](CommConfig& c) { c.algo = algo; pipelined(c); });
    }
  }
}

// A model like the network lab's makes the chain cut a 1.2 MB buffer into
// more chunks than MCCL_CHUNK_BYTES alone would (every rank the same count).
TEST(Broadcast, ChainAndReduceInModelSizedChunks) {
  const CostModel lab = labModel();
  const size_t count = 300007;  // float32, a prime
  for (int n : {2, 3, 8}) {
    // These ranks share one host (loopback), which the agreed model records.
    CostModel shared = lab;
    shared.sharedHost = true;
    const size_t k = algo::chainChunks(shared, OpKind::kBroadcast, count, 4, n, 1 << 20);
    if (n > 2) {
      ASSERT_GT(k, 2u) << "the model should pipeline a 1.2 MB chain on " << n << " ranks";
    }
    for (std::string algo : {"broadcast=chain,reduce=chain"}) {
      runRanks(n, [&](Communicator& comm) {
        const int root = n / 2;
        Buffer buf(DataType::kFloat32, count);
        for (size_t i = 0; i < count; ++i) {
          buf.set(i, comm.rank() == root ? value(DataType::kFloat32, ReduceOp::kSum, root, i, 7) : 99);
        }
        broadcast(comm, BroadcastOptions{buf.data(), count, DataType::kFloat32, root})->wait();
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf.at(i), value(DataType::kFloat32, ReduceOp::kSum, root, i, 7))
              << where(comm, "broadcast", DataType::kFloat32, ReduceOp::kSum, count, i);
        }
        Buffer r(DataType::kInt32, count);
        for (size_t i = 0; i < count; ++i) r.set(i, value(DataType::kInt32, ReduceOp::kSum, comm.rank(), i, 8));
        ReduceOptions ro;
        ro.buf = r.data();
        ro.count = count;
        ro.dtype = DataType::kInt32;
        ro.op = ReduceOp::kSum;
        ro.root = root;
        reduce(comm, ro)->wait();
        if (comm.rank() == root) {
          for (size_t i = 0; i < count; ++i) {
            Buffer w(DataType::kInt32, 1);
            w.set(0, reference(DataType::kInt32, ReduceOp::kSum, n, i, 8, 1.0));
            ASSERT_EQ(r.at(i), w.at(0)) << where(comm, "reduce", DataType::kInt32, ReduceOp::kSum, count, i);
          }
        }
      }, [&](CommConfig& c) { c.algo = algo; c.model = lab; });
    }
  }
}

TEST(Reduce, AllAlgorithmsRootsOps) {
  for (std::string algo : {"reduce=binomial", "reduce=chain"}) {
    for (int n : kWorlds) {
      runRanks(n, [&](Communicator& comm) {
        int salt = 0;
        for (int root : {0, n - 1}) {
          for (DataType dt : {DataType::kFloat32, DataType::kInt32, DataType::kBFloat16}) {
            for (int o = 0; o < kNumReduceOps; ++o) {
              ReduceOp op = static_cast<ReduceOp>(o);
              if (!reduceSupported(dt, op)) continue;
              for (size_t count : {size_t{0}, size_t{1}, size_t{1031}, size_t{9001}}) {
                ++salt;
                Buffer buf(dt, count), orig(dt, count);
                for (size_t i = 0; i < count; ++i) buf.set(i, value(dt, op, comm.rank(), i, salt));
                orig.bytes = buf.bytes;
                ReduceOptions ro;
                ro.buf = buf.data();
                ro.count = count;
                ro.dtype = dt;
                ro.op = op;
                ro.premulFactor = 0.5;
                ro.root = root;
                reduce(comm, ro)->wait();
                for (size_t i = 0; i < count; ++i) {
                  if (comm.rank() == root) {
                    Buffer w(dt, 1);
                    w.set(0, reference(dt, op, n, i, salt, 0.5));
                    ASSERT_TRUE(close(dt, op, buf.at(i), w.at(0)))
                        << where(comm, "reduce", dt, op, count, i) << " got " << buf.at(i);
                  } else {
                    ASSERT_EQ(buf.bytes, orig.bytes) << "reduce modified a non-root input on rank "
                                                     << comm.rank();
                    break;
                  }
                }
              }
            }
          }
        }
      }, [&](CommConfig& c) { c.algo = algo; pipelined(c); });
    }
  }
}

TEST(Allgather, RingAndDirectSeparateAndInPlace) {
  for (std::string algo : {"allgather=ring", "allgather=direct"}) {
    for (int n : kWorlds) {
      runRanks(n, [&](Communicator& comm) {
        int salt = 0;
        for (DataType dt : {DataType::kFloat64, DataType::kUInt8, DataType::kInt16}) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{3001}}) {
            for (bool inPlace : {false, true}) {
              ++salt;
              Buffer in(dt, count), out(dt, count * static_cast<size_t>(n));
              std::vector<void*> outs;
              for (int b = 0; b < n; ++b) {
                outs.push_back(static_cast<uint8_t*>(out.data()) + static_cast<size_t>(b) * count * dtypeSize(dt));
              }
              void* mine = inPlace ? outs[static_cast<size_t>(comm.rank())] : in.data();
              for (size_t i = 0; i < count; ++i) put(dt, mine, i, value(dt, ReduceOp::kSum, comm.rank(), i, salt));
              AllgatherOptions o;
              o.in = mine;
              o.out = outs;
              o.count = count;
              o.dtype = dt;
              allgather(comm, o)->wait();
              for (int b = 0; b < n; ++b) {
                for (size_t i = 0; i < count; ++i) {
                  ASSERT_EQ(out.at(static_cast<size_t>(b) * count + i), value(dt, ReduceOp::kSum, b, i, salt))
                      << where(comm, "allgather", dt, ReduceOp::kSum, count, i) << " block " << b;
                }
              }
            }
          }
        }
      }, [&](CommConfig& c) { c.algo = algo; pipelined(c); });
    }
  }
}

TEST(ReduceScatter, RingAndDirect) {
  for (std::string algo : {"reduce_scatter=ring", "reduce_scatter=direct"}) {
    for (int n : kWorlds) {
      runRanks(n, [&](Communicator& comm) {
        int salt = 0;
        for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16}) {
          for (int o = 0; o < kNumReduceOps; ++o) {
            ReduceOp op = static_cast<ReduceOp>(o);
            if (!reduceSupported(dt, op)) continue;
            for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{5003}, size_t{40009}}) {
              ++salt;
              // Block b of this rank's input holds elements b*count .. (b+1)*count.
              Buffer in(dt, count * static_cast<size_t>(n)), out(dt, count);
              std::vector<const void*> ins;
              for (int b = 0; b < n; ++b) {
                ins.push_back(static_cast<uint8_t*>(in.data()) + static_cast<size_t>(b) * count * dtypeSize(dt));
              }
              for (size_t i = 0; i < count * static_cast<size_t>(n); ++i) in.set(i, value(dt, op, comm.rank(), i, salt));
              Buffer before = in;
              ReduceScatterOptions ro;
              ro.in = ins;
              ro.out = out.data();
              ro.count = count;
              ro.dtype = dt;
              ro.op = op;
              ro.premulFactor = 0.5;
              reduceScatter(comm, ro)->wait();
              EXPECT_EQ(in.bytes, before.bytes) << "reduce_scatter modified its input";
              for (size_t i = 0; i < count; ++i) {
                Buffer w(dt, 1);
                w.set(0, reference(dt, op, n, static_cast<size_t>(comm.rank()) * count + i, salt, 0.5));
                ASSERT_TRUE(close(dt, op, out.at(i), w.at(0)))
                    << where(comm, "reduce_scatter", dt, op, count, i) << " got " << out.at(i)
                    << " want " << w.at(0);
              }
            }
          }
        }
      }, [&](CommConfig& c) { c.algo = algo; pipelined(c); });
    }
  }
}

// An output over an input block (in place) is refused before anything is
// sent: the algorithms write the output before they read every block, and
// the sums came out wrong (the torch adapter passes such calls a temporary).
TEST(ReduceScatter, OutputOverAnInputBlockIsRefused) {
  runRanks(3, [&](Communicator& comm) {
    const DataType dt = DataType::kFloat32;
    const size_t count = 13;
    Buffer in(dt, count * 3);
    std::vector<const void*> ins;
    for (int b = 0; b < 3; ++b) ins.push_back(static_cast<uint8_t*>(in.data()) + static_cast<size_t>(b) * count * 4);
    ReduceScatterOptions ro;
    ro.in = ins;
    ro.count = count;
    ro.dtype = dt;
    for (size_t at : {size_t{0}, count * 4 + 4, count * 8}) {
      ro.out = static_cast<uint8_t*>(in.data()) + at;  // over block 0, across 1 and 2, block 2
      try {
        reduceScatter(comm, ro)->wait();
        ADD_FAILURE() << "an output at byte " << at << " of the input was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kUsage);
        EXPECT_NE(std::string(e.what()).find("reduce_scatter: the output overlaps input block"), std::string::npos)
            << e.what();
      }
    }
    // Nothing was sent: the group still works.
    Buffer out(dt, count);
    for (size_t i = 0; i < count * 3; ++i) in.set(i, 1.0);
    ro.out = out.data();
    reduceScatter(comm, ro)->wait();
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out.at(i), 3.0);
  });
}

TEST(GatherScatter, EveryRoot) {
  for (int n : kWorlds) {
    runRanks(n, [&](Communicator& comm) {
      int salt = 0;
      const DataType dt = DataType::kInt32;
      for (int root = 0; root < n; ++root) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{4099}}) {
          ++salt;
          Buffer in(dt, count), all(dt, count * static_cast<size_t>(n));
          for (size_t i = 0; i < count; ++i) in.set(i, value(dt, ReduceOp::kSum, comm.rank(), i, salt));
          std::vector<void*> outs;
          for (int b = 0; b < n; ++b) outs.push_back(static_cast<uint8_t*>(all.data()) + static_cast<size_t>(b) * count * 4);
          GatherOptions g;
          g.in = in.data();
          g.out = comm.rank() == root ? outs : std::vector<void*>{};
          g.count = count;
          g.dtype = dt;
          g.root = root;
          gather(comm, g)->wait();
          if (comm.rank() == root) {
            for (int b = 0; b < n; ++b) {
              for (size_t i = 0; i < count; ++i) {
                ASSERT_EQ(all.at(static_cast<size_t>(b) * count + i), value(dt, ReduceOp::kSum, b, i, salt)) << "gather";
              }
            }
          }
          // Scatter back a transformed copy: block b gets (value + b).
          std::vector<const void*> ins;
          if (comm.rank() == root) {
            for (int b = 0; b < n; ++b) {
              for (size_t i = 0; i < count; ++i) all.set(static_cast<size_t>(b) * count + i, value(dt, ReduceOp::kSum, b, i, salt) + b);
              ins.push_back(outs[static_cast<size_t>(b)]);
            }
          }
          Buffer got(dt, count);
          ScatterOptions s;
          s.in = ins;
          s.out = got.data();
          s.count = count;
          s.dtype = dt;
          s.root = root;
          scatter(comm, s)->wait();
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(got.at(i), value(dt, ReduceOp::kSum, comm.rank(), i, salt) + comm.rank()) << "scatter";
          }
        }
      }
    }, pipelined);
  }
}

TEST(Alltoall, UnevenSplits) {
  for (int n : kWorlds) {
    runRanks(n, [&](Communicator& comm) {
      const int r = comm.rank();
      const DataType dt = DataType::kFloat32;
      for (int round = 0; round < 3; ++round) {
        // Rank r sends (r + 2j + round) % 5 * 331 elements to rank j (some zero).
        auto countFor = [&](int src, int dst) { return static_cast<size_t>((src + 2 * dst + round) % 5) * 331; };
        std::vector<Buffer> ins, outs;
        AlltoallOptions o;
        o.dtype = dt;
        for (int j = 0; j < n; ++j) {
          ins.emplace_back(dt, countFor(r, j));
          outs.emplace_back(dt, countFor(j, r));
        }
        for (int j = 0; j < n; ++j) {
          for (size_t i = 0; i < ins[static_cast<size_t>(j)].n; ++i) ins[static_cast<size_t>(j)].set(i, r * 1000 + j * 10 + static_cast<double>(i % 7));
          o.in.push_back(ins[static_cast<size_t>(j)].data());
          o.inCounts.push_back(ins[static_cast<size_t>(j)].n);
          o.out.push_back(outs[static_cast<size_t>(j)].data());
          o.outCounts.push_back(outs[static_cast<size_t>(j)].n);
        }
        alltoall(comm, o)->wait();
        for (int j = 0; j < n; ++j) {
          for (size_t i = 0; i < outs[static_cast<size_t>(j)].n; ++i) {
            ASSERT_EQ(outs[static_cast<size_t>(j)].at(i), j * 1000 + r * 10 + static_cast<double>(i % 7))
                << "alltoall rank " << r << " from " << j << " at " << i;
          }
        }
      }
    }, pipelined);
  }
}

TEST(Barrier, NobodyLeavesEarly) {
  for (int n : kWorlds) {
    std::atomic<int> arrived{0};
    runRanks(n, [&](Communicator& comm) {
      for (int round = 1; round <= 5; ++round) {
        if (comm.rank() == round % comm.size()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        arrived.fetch_add(1);
        barrier(comm)->wait();
        ASSERT_GE(arrived.load(), round * comm.size()) << "rank " << comm.rank() << " left barrier " << round << " early";
        barrier(comm)->wait();  // keep the next round's increments out of this check
      }
    });
  }
}

TEST(Async, ManyOutstandingOpsCompleteInOrder) {
  for (int n : {2, 3, 5}) {
    runRanks(n, [&](Communicator& comm) {
      const int ops = 64;
      std::vector<Buffer> bufs;
      std::vector<std::shared_ptr<Work>> works;
      for (int k = 0; k < ops; ++k) bufs.emplace_back(DataType::kInt64, static_cast<size_t>(1 + k * 97));
      for (int k = 0; k < ops; ++k) {
        Buffer& b = bufs[static_cast<size_t>(k)];
        for (size_t i = 0; i < b.n; ++i) b.set(i, value(DataType::kInt64, ReduceOp::kSum, comm.rank(), i, k));
        AllreduceOptions o;
        o.buf = b.data();
        o.count = b.n;
        o.dtype = DataType::kInt64;
        works.push_back(allreduce(comm, o));
      }
      for (int k = ops - 1; k >= 0; --k) works[static_cast<size_t>(k)]->wait();
      for (int k = 0; k < ops; ++k) {
        Buffer& b = bufs[static_cast<size_t>(k)];
        for (size_t i = 0; i < b.n; ++i) {
          ASSERT_EQ(b.at(i), reference(DataType::kInt64, ReduceOp::kSum, n, i, k)) << "op " << k;
        }
      }
    }, [](CommConfig& c) { c.inflightOps = 4; });
  }
}

}  // namespace
}  // namespace mccl::test
