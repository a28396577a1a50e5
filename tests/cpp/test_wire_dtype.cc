// MCCL_WIRE_DTYPE: float32 SUM/AVG all-reduce and reduce-scatter with bf16 or
// fp16 on the wire. Every rank ends bit-identical; the error against a float64
// reference stays within one rounding of each input (and of the result) at
// any world size; ops it does not apply to are untouched; the setting is
// parsed strictly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "algo/model.h"
#include "algo/registry.h"
#include "algo/select.h"
#include "harness.h"
#include "wire_runs.h"
#include "reduce/half.h"
#include "reduce/wire.h"

namespace mccl::test {
namespace {

using kernels::WireDtype;

float input(int rank, size_t i) {
  // Distinct per rank, mixed signs and magnitudes in [-4, 4).
  uint32_t h = static_cast<uint32_t>(rank + 1) * 2654435761u ^ static_cast<uint32_t>(i) * 2246822519u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return (static_cast<float>(h % 65536) / 8192.0f) - 4.0f;
}

double unitRoundoff(WireDtype w) { return w == WireDtype::kBf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

using Outputs = WireRun<float>;

void allreduceOnRanks(int n, size_t count, ReduceOp op, WireDtype w, Outputs& run, size_t minBytes = 0,
                      DataType dt = DataType::kFloat32, const std::string& reduce = "ring") {
  allreduceOnWire<float>(n, count, op, dt, {kernels::wireDtypeName(w), reduce, minBytes}, input, run);
}

TEST(WireKernels, RoundTripsRoundToNearestEvenAndSaturateFp16) {
  const std::vector<float> exact = {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 1024.0f};
  for (WireDtype w : {WireDtype::kBf16, WireDtype::kFp16}) {
    std::vector<uint16_t> wire(exact.size());
    std::vector<float> back(exact.size());
    kernels::toWire(wire.data(), exact.data(), exact.size(), w);
    kernels::fromWire(back.data(), wire.data(), exact.size(), w);
    for (size_t i = 0; i < exact.size(); ++i) EXPECT_EQ(back[i], exact[i]) << kernels::wireDtypeName(w);
    // acc += wire: accumulation happens in float32.
    std::vector<float> acc(exact.size(), 0.25f);
    kernels::addWire(acc.data(), wire.data(), exact.size(), w);
    for (size_t i = 0; i < exact.size(); ++i) EXPECT_EQ(acc[i], exact[i] + 0.25f);
  }
  // Ties go to even: 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7.
  float tie = 1.0f + std::ldexp(1.0f, -8);
  uint16_t b;
  kernels::toWire(&b, &tie, 1, WireDtype::kBf16);
  EXPECT_EQ(kernels::bf16ToFloat(b), 1.0f);
  // fp16: finite overflow saturates (and is counted); infinity and NaN stay.
  const uint64_t before = kernels::saturations();
  const float big[] = {70000.0f, -1e30f, std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), 65504.0f};
  uint16_t h[5];
  float back[5];
  kernels::toWire(h, big, 5, WireDtype::kFp16);
  kernels::fromWire(back, h, 5, WireDtype::kFp16);
  EXPECT_EQ(back[0], 65504.0f);
  EXPECT_EQ(back[1], -65504.0f);
  EXPECT_TRUE(std::isinf(back[2]) && back[2] > 0);
  EXPECT_TRUE(std::isnan(back[3]));
  EXPECT_EQ(back[4], 65504.0f);
  EXPECT_EQ(kernels::saturations() - before, 2u);
}

// The vectorised float16 paths (F16C on x86-64) agree with the scalar
// reference on every half value and on float bit patterns of every exponent.
TEST(WireKernels, VectorFp16MatchesTheScalarReference) {
  std::vector<float> in;
  for (uint32_t i = 0; i < 200003; ++i) {
    uint32_t h = i * 2654435761u;
    h ^= h >> 16;
    in.push_back(std::bit_cast<float>(h * 2246822519u));
  }
  for (float special : {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -65536.0f, 5.96e-8f, 1e-10f,
                        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
    in.push_back(special);
  }
  std::vector<uint16_t> got(in.size());
  const uint64_t before = kernels::saturations();
  kernels::toWire(got.data(), in.data(), in.size(), WireDtype::kFp16);
  uint64_t expectSaturated = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    uint16_t want = kernels::floatToHalf(in[i]);
    if ((want & 0x7fffu) == 0x7c00u && std::isfinite(in[i])) {
      want = static_cast<uint16_t>((want & 0x8000u) | 0x7bffu);
      ++expectSaturated;
    }
    if (std::isnan(in[i])) {
      ASSERT_TRUE(std::isnan(kernels::halfToFloat(got[i]))) << i;
    } else {
      ASSERT_EQ(got[i], want) << "at " << i << ": " << in[i];
    }
  }
  EXPECT_EQ(kernels::saturations() - before, expectSaturated);
  std::vector<uint16_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> back(65536), acc(65536, 1.5f);
  kernels::fromWire(back.data(), halves.data(), halves.size(), WireDtype::kFp16);
  kernels::addWire(acc.data(), halves.data(), halves.size(), WireDtype::kFp16);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = kernels::halfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(back[h]) && std::isnan(acc[h])) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(back[h]), std::bit_cast<uint32_t>(want)) << h;
      ASSERT_EQ(acc[h], 1.5f + want) << h;
    }
  }
}

// Ring: n-1 rounded partial sums and the final rounding, (n+1) roundings of
// the sum at most. Pairwise: each other rank's input rounded once and the
// final value once: a bound that does not grow with n.
TEST(WireDtype, AllreduceIsBitIdenticalOnEveryRankAndWithinItsRoundingBound) {
  for (const std::string reduce : {"ring", "pairwise"}) {
    for (WireDtype w : {WireDtype::kBf16, WireDtype::kFp16}) {
      for (int n : {2, 3, 5}) {
        for (size_t count : {size_t{1}, size_t{2}, size_t{13}, size_t{1031}, size_t{100003}}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            Outputs run;
            allreduceOnRanks(n, count, op, w, run, 0, DataType::kFloat32, reduce);
            const std::string what = strCat(reduce, " ", kernels::wireDtypeName(w), " n=", n,
                                            " count=", count, " ", reduceOpName(op));
            for (int r = 0; r < n; ++r) {
              const std::string& d = run.desc[static_cast<size_t>(r)];
              ASSERT_NE(d.find(strCat("algorithm=", reduce, "_wire) wire=", kernels::wireDtypeName(w))),
                        std::string::npos)
                  << what << ": " << d;
              ASSERT_EQ(std::memcmp(run.out[static_cast<size_t>(r)].data(), run.out[0].data(), count * 4), 0)
                  << what << ": rank " << r << " differs from rank 0";
            }
            const double u = unitRoundoff(w);
            const double roundings = reduce == "ring" ? n + 1 : 2;
            double worst = 0;
            for (size_t i = 0; i < count; ++i) {
              double sum = 0, mag = 0;
              for (int r = 0; r < n; ++r) {
                sum += input(r, i);
                mag += std::fabs(input(r, i));
              }
              const double want = op == ReduceOp::kAvg ? sum / n : sum;
              const double scale = op == ReduceOp::kAvg ? mag / n : mag;
              const double err = std::fabs(run.out[0][i] - want);
              ASSERT_LE(err, roundings * u * scale * (1 + 1e-5) + 1e-30) << what << " at " << i;
              worst = std::max(worst, err / std::max(scale, 1e-30));
            }
            // And it did round: 16-bit values are not float32's.
            if (count >= 1031) {
              EXPECT_GT(worst, 0.0) << what;
            }
          }
        }
      }
    }
  }
}

TEST(WireDtype, ReduceScatterIsWithinItsRoundingBound) {
  for (const std::string reduce : {"ring", "pairwise"}) {
  for (WireDtype w : {WireDtype::kBf16, WireDtype::kFp16}) {
    for (int n : {2, 3, 5}) {
      for (size_t count : {size_t{1}, size_t{13}, size_t{1031}, size_t{20011}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          const std::string what = strCat(reduce, " ", kernels::wireDtypeName(w), " n=", n, " count=",
                                          count, " ", reduceOpName(op));
          std::vector<std::string> desc(static_cast<size_t>(n));
          std::mutex mu;
          runRanks(n, [&](Communicator& comm) {
            // Rank r's block b: input(r, b * count + i).
            std::vector<std::vector<float>> blocks(static_cast<size_t>(n), std::vector<float>(count));
            std::vector<const void*> in;
            for (int b = 0; b < n; ++b) {
              for (size_t i = 0; i < count; ++i) blocks[static_cast<size_t>(b)][i] = input(comm.rank(), b * count + i);
              in.push_back(blocks[static_cast<size_t>(b)].data());
            }
            std::vector<float> out(count, -1.0f);
            ReduceScatterOptions o;
            o.in = in;
            o.out = out.data();
            o.count = count;
            o.op = op;
            auto work = reduceScatter(comm, o);
            work->wait();
            const double u = unitRoundoff(w);
            for (size_t i = 0; i < count; ++i) {
              double sum = 0, mag = 0;
              for (int r = 0; r < n; ++r) {
                sum += input(r, comm.rank() * count + i);
                mag += std::fabs(input(r, comm.rank() * count + i));
              }
              const double want = op == ReduceOp::kAvg ? sum / n : sum;
              const double scale = op == ReduceOp::kAvg ? mag / n : mag;
              // ring: n-1 rounded partial sums; pairwise: each input once
              const double roundings = reduce == "ring" ? n - 1 : 1;
              ASSERT_LE(std::fabs(out[i] - want), roundings * u * scale * (1 + 1e-5) + 1e-30)
                  << what << " rank " << comm.rank() << " at " << i;
            }
            std::lock_guard<std::mutex> lock(mu);
            desc[static_cast<size_t>(comm.rank())] = work->description();
          }, [&](CommConfig& c) {
            c.wireDtype = kernels::wireDtypeName(w);
            c.wireDtypeMinBytes = 0;
            c.wireReduce = reduce;
            c.chunkBytes = 4096;
          });
          EXPECT_NE(desc[0].find(strCat("algorithm=", reduce, "_wire) wire=", kernels::wireDtypeName(w))),
                    std::string::npos)
              << what << ": " << desc[0];
        }
      }
    }
  }
  }
}

TEST(WireDtype, SmallOpsOtherDtypesAndOtherOpsStayFp32) {
  Outputs run;
  // Below MCCL_WIRE_DTYPE_MIN_BYTES: float32 on the wire, exact for these sums.
  allreduceOnRanks(3, 1031, ReduceOp::kSum, WireDtype::kBf16, run, /*minBytes=*/1031 * 4 + 1);
  EXPECT_EQ(run.desc[0].find("wire="), std::string::npos) << run.desc[0];
  for (size_t i = 0; i < 1031; ++i) {
    const float want = (input(0, i) + input(1, i)) + input(2, i);
    ASSERT_NEAR(run.out[1][i], want, 1e-5) << i;
  }
  // MAX is not a sum: never compressed.
  allreduceOnRanks(3, 1031, ReduceOp::kMax, WireDtype::kBf16, run);
  EXPECT_EQ(run.desc[0].find("wire="), std::string::npos) << run.desc[0];
  for (size_t i = 0; i < 1031; ++i) {
    ASSERT_EQ(run.out[2][i], std::max({input(0, i), input(1, i), input(2, i)})) << i;
  }
}

TEST(WireDtype, Fp16SaturatesInsteadOfOverflowing) {
  const uint64_t before = kernels::saturations();
  std::vector<std::vector<float>> out(3);
  std::mutex mu;
  runRanks(3, [&](Communicator& comm) {
    std::vector<float> v(4099, 40000.0f);
    AllreduceOptions o;
    o.buf = v.data();
    o.count = v.size();
    allreduce(comm, o)->wait();
    std::lock_guard<std::mutex> lock(mu);
    out[static_cast<size_t>(comm.rank())] = v;
  }, [](CommConfig& c) {
    c.wireDtype = "fp16";
    c.wireDtypeMinBytes = 0;
  });
  // 120000 does not fit fp16: every value is finite, and the same everywhere.
  for (const auto& v : out) {
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      ASSERT_EQ(x, out[0][0]);
    }
  }
  EXPECT_GT(kernels::saturations(), before);
}

// float64 travels the same wires (through float32) and is accumulated in
// float64: bit-identical on every rank, within the wire's bound, and not the
// exact sum (it did go through the wire).
TEST(WireDtype, Float64TravelsTheWireAndAccumulatesInFloat64) {
  for (const std::string wire : {"bf16", "int8"}) {
    for (const std::string reduce : {"ring", "pairwise"}) {
      for (int n : {3, 8}) {
        const size_t count = 1031;
        const std::string what = strCat("float64 ", wire, " ", reduce, " n=", n);
        WireRun<double> run;
        allreduceOnWire<double>(n, count, ReduceOp::kSum, DataType::kFloat64, {wire, reduce},
                                [](int r, size_t i) { return input(r, i) * (1.0 + 1e-9 * r); }, run);
        const auto& out = run.out;
        const auto& desc = run.desc;
        const std::string algorithm = wire == "int8" ? "pairwise_int8" : reduce + "_wire";
        ASSERT_NE(desc[0].find(strCat("algorithm=", algorithm, ") wire=", wire)), std::string::npos)
            << what << ": " << desc[0];
        double worst = 0;
        for (size_t i = 0; i < count; ++i) {
          for (int r = 1; r < n; ++r) ASSERT_EQ(out[static_cast<size_t>(r)][i], out[0][i]) << what << " at " << i;
          double sum = 0, mag = 0, amax = 0;
          for (int r = 0; r < n; ++r) {
            const double x = input(r, i) * (1.0 + 1e-9 * r);
            sum += x;
            mag += std::fabs(x);
          }
          const size_t g0 = i / 256 * 256;
          for (size_t j = g0; j < std::min(count, g0 + 256); ++j) {
            for (int r = 0; r < n; ++r) amax = std::max(amax, std::fabs(double(input(r, j))));
          }
          // bf16: n+1 roundings of u on the way (ring), and float32's on entry;
          // int8: half a step of each input's group and of the result's.
          const double bound = wire == "bf16" ? ((n + 1) * std::ldexp(1.0, -8) + (n + 1) * std::ldexp(1.0, -24)) * mag
                                              : (n + 1) * (n * amax) / 254.0 * 1.01;
          const double err = std::fabs(out[0][i] - sum);
          ASSERT_LE(err, bound) << what << " at " << i;
          worst = std::max(worst, err);
        }
        EXPECT_GT(worst, 1e-6) << what << ": the exact sum came back (no wire?)";
      }
    }
  }
}

TEST(WireDtype, SettingIsParsedStrictly) {
  CommConfig c = baseConfig(0, 2);
  c.wireDtype = "bf8";
  try {
    c.validate();
    FAIL() << "MCCL_WIRE_DTYPE=bf8 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MCCL_WIRE_DTYPE=bf8 is not one of fp32, bf16, fp16, int8"),
              std::string::npos) << e.what();
  }
  // A group's own values (mccl.Options): only the settings a group may choose.
  CommConfig g = baseConfig(0, 2);
  g.applySetting("MCCL_WIRE_DTYPE", "fp16");
  g.applySetting("MCCL_WIRE_DTYPE_MIN_BYTES", "64K");
  EXPECT_EQ(g.wireDtype, "fp16");
  EXPECT_EQ(g.wireDtypeMinBytes, 65536u);
  EXPECT_THROW(g.applySetting("MCCL_WIRE_DTYPE", "bf8"), Error);
  EXPECT_THROW(g.applySetting("MCCL_WIRE_DTYPE_MIN_BYTES", "lots"), Error);
  // The error names the argument as the caller gave it, and why.
  for (const auto& [value, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty"}, {"12x", "not a decimal number"}, {"-1", "out of range"}}) {
    try {
      g.applySetting("MCCL_WIRE_DTYPE_MIN_BYTES", value);
      ADD_FAILURE() << "wire_dtype_min_bytes '" << value << "' was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("mccl.Options: wire_dtype_min_bytes '" + value + "'"), std::string::npos) << m;
      EXPECT_NE(m.find(why), std::string::npos) << m;
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << m;
    }
  }
  EXPECT_EQ(g.wireDtypeMinBytes, 65536u);  // unchanged by the refusals
  EXPECT_THROW(g.applySetting("MCCL_CHUNK_BYTES", "1M"), Error);
  g.applySetting("MCCL_WIRE_REDUCE", "pairwise");
  EXPECT_EQ(g.wireReduce, "pairwise");
  EXPECT_THROW(g.applySetting("MCCL_WIRE_REDUCE", "tree"), Error);
  CommConfig bad = baseConfig(0, 2);
  bad.wireReduce = "tree";
  EXPECT_THROW(bad.validate(), Error);
  CommConfig a = baseConfig(0, 2), b = baseConfig(1, 2);
  a.wireDtype = "bf16";
  b.wireDtype = "fp32";
  EXPECT_NE(b.wireMismatch(a.wireSettings()).find("MCCL_WIRE_DTYPE is 'fp32' on this rank but 'bf16'"),
            std::string::npos);
}

}  // namespace
}  // namespace mccl::test

namespace mccl::test {
namespace {

// algorithmFor names what the calls run: the wire path where it applies
// (float SUM/AVG all-reduce from MCCL_WIRE_DTYPE_MIN_BYTES, not when
// MCCL_ALGO forces one), else the table's choice.
TEST(WireDtype, AlgorithmForNamesThePathTheCallRuns) {
  auto names = [](const std::function<void(CommConfig&)>& setup) {
    std::vector<std::string> got(5);
    runRanks(3, [&](Communicator& comm) {
      if (comm.rank() != 0) return;
      got[0] = algorithmFor(comm, OpKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 1 << 16);
      got[1] = algorithmFor(comm, OpKind::kAllreduce, DataType::kInt32, ReduceOp::kSum, 1 << 16);
      got[2] = algorithmFor(comm, OpKind::kAllreduce, DataType::kFloat32, ReduceOp::kMax, 1 << 16);
      got[3] = algorithmFor(comm, OpKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 16);
      got[4] = algorithmFor(comm, OpKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 1 << 20);
      EXPECT_THROW(algorithmFor(comm, OpKind::kAllgather, DataType::kFloat32, ReduceOp::kSum, 8), Error);
    }, setup);
    return got;
  };
  auto wire = names([](CommConfig& c) {
    c.wireDtype = "bf16";
    c.wireDtypeMinBytes = 1024;
    c.wireReduce = "ring";
  });
  EXPECT_EQ(wire[0], "ring_wire (bf16)");
  EXPECT_EQ(wire[1], "ring");  // integers: the table
  EXPECT_EQ(wire[2], "ring");  // MAX: the table
  EXPECT_EQ(wire[3].find("wire"), std::string::npos) << wire[3];  // under MCCL_WIRE_DTYPE_MIN_BYTES
  EXPECT_TRUE(wire[4] == "chain" || wire[4] == "binomial") << wire[4];
  auto int8 = names([](CommConfig& c) {
    c.wireDtype = "int8";
    c.wireDtypeMinBytes = 0;
  });
  EXPECT_EQ(int8[0], "pairwise_int8");
  auto forced = names([](CommConfig& c) {
    c.wireDtype = "bf16";
    c.wireDtypeMinBytes = 0;
    c.algo = "allreduce=torus,broadcast=chain";
  });
  EXPECT_EQ(forced[0], "torus");
  EXPECT_EQ(forced[4], "chain");
  auto pairwise = names([](CommConfig& c) {
    c.wireDtype = "fp16";
    c.wireDtypeMinBytes = 0;
    c.wireReduce = "pairwise";
  });
  EXPECT_EQ(pairwise[0], "pairwise_wire (fp16)");
}

// The wire algorithms are rows of the one table: ids and names of their own
// (the frames, the trace and errors carry them), costs the model prices,
// chosen by the wire settings only -- never by the model, never by MCCL_ALGO.
TEST(WireDtype, WireAlgorithmsAreRowsOfTheTable) {
  struct Row {
    OpKind op;
    const char* name;
    Algo id;
  };
  for (const Row& r : {Row{OpKind::kAllreduce, "ring_wire", Algo::kRingWire},
                       Row{OpKind::kAllreduce, "pairwise_wire", Algo::kPairwiseWire},
                       Row{OpKind::kAllreduce, "pairwise_int8", Algo::kPairwiseInt8},
                       Row{OpKind::kReduceScatter, "ring_wire", Algo::kRingWire},
                       Row{OpKind::kReduceScatter, "pairwise_wire", Algo::kPairwiseWire},
                       Row{OpKind::kReduceScatter, "pairwise_int8", Algo::kPairwiseInt8}}) {
    const algo::Algorithm* a = algo::find(r.op, r.name);
    ASSERT_NE(a, nullptr) << r.name;
    EXPECT_EQ(a->id, r.id) << r.name;
    EXPECT_TRUE(a->isWire()) << r.name;
    EXPECT_EQ(algoName(r.id), r.name);
    EXPECT_EQ(algo::algorithmsFor(r.op).find("wire"), std::string::npos) << algo::algorithmsFor(r.op);
    EXPECT_EQ(algo::algorithmsFor(r.op).find("int8"), std::string::npos) << algo::algorithmsFor(r.op);
  }
  CommConfig cfg;
  cfg.wireDtypeMinBytes = 0;
  const CostModel m;
  // Priced as the ring with the wire's bytes: dearer than nothing, cheaper
  // than float32 for large buffers, int8 cheaper than 16 bits.
  for (int n : {2, 5, 8}) {
    const size_t x = size_t{64} << 20;
    const double fp32 = algo::predictSeconds(m, OpKind::kAllreduce, Algo::kRing, x, n, cfg.chunkBytes);
    const double w16 = algo::predictSeconds(m, OpKind::kAllreduce, Algo::kRingWire, x, n, cfg.chunkBytes);
    const double pw16 = algo::predictSeconds(m, OpKind::kAllreduce, Algo::kPairwiseWire, x, n, cfg.chunkBytes);
    const double i8 = algo::predictSeconds(m, OpKind::kAllreduce, Algo::kPairwiseInt8, x, n, cfg.chunkBytes);
    EXPECT_GT(w16, 0) << n;
    EXPECT_LT(w16, fp32) << n;
    EXPECT_EQ(w16, pw16) << n;
    EXPECT_LT(i8, w16) << n;
    const double rs32 = algo::predictSeconds(m, OpKind::kReduceScatter, Algo::kRing, x / n, n, cfg.chunkBytes);
    const double rs16 = algo::predictSeconds(m, OpKind::kReduceScatter, Algo::kRingWire, x / n, n, cfg.chunkBytes);
    EXPECT_LT(rs16, rs32) << n;
  }
  // The selector never takes a wire row, whatever the size; MCCL_ALGO cannot name one.
  for (const char* wire : {"fp32", "bf16", "int8"}) {
    cfg.wireDtype = wire;
    for (int n : {2, 3, 8, 24}) {
      cfg.size = n;
      for (size_t bytes : {size_t{8}, size_t{1} << 16, size_t{1} << 26}) {
        for (OpKind op : {OpKind::kAllreduce, OpKind::kReduceScatter}) {
          EXPECT_FALSE(algo::chooseAlgorithm(cfg, m, op, bytes).isWire()) << wire << " n=" << n << " " << bytes;
        }
      }
    }
  }
  cfg.algo = "allreduce=ring_wire";
  try {
    algo::chooseAlgorithm(cfg, m, OpKind::kAllreduce, 1024);
    ADD_FAILURE() << "MCCL_ALGO took a wire algorithm";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("'ring_wire' is not an algorithm for allreduce"), std::string::npos)
        << e.what();
  }
  // Which row serves the wire: MCCL_WIRE_REDUCE for 16 bits (auto: the ring
  // below 8 ranks, the pairwise exchange from 8), int8 always pairwise; not
  // for other collectives, dtypes or ops, below MCCL_WIRE_DTYPE_MIN_BYTES,
  // on one rank, or where MCCL_ALGO forces the collective's algorithm.
  auto chosen = [&](const char* wire, const char* reduce, int n, OpKind op = OpKind::kAllreduce,
                    DataType dt = DataType::kFloat32, ReduceOp rop = ReduceOp::kAvg, size_t bytes = 1 << 20,
                    const char* forced = "") -> std::string {
    CommConfig c;
    c.wireDtype = wire;
    c.wireReduce = reduce;
    c.size = n;
    c.algo = forced;
    const algo::Algorithm* a = algo::wireAlgorithm(c, op, dt, rop, bytes);
    return a == nullptr ? "none" : a->name;
  };
  EXPECT_EQ(chosen("bf16", "auto", 7), "ring_wire");
  EXPECT_EQ(chosen("bf16", "auto", 8), "pairwise_wire");
  EXPECT_EQ(chosen("fp16", "ring", 24), "ring_wire");
  EXPECT_EQ(chosen("fp16", "pairwise", 2), "pairwise_wire");
  EXPECT_EQ(chosen("int8", "ring", 3), "pairwise_int8");
  EXPECT_EQ(chosen("int8", "auto", 3, OpKind::kReduceScatter), "pairwise_int8");
  EXPECT_EQ(chosen("bf16", "auto", 3, OpKind::kReduceScatter, DataType::kFloat64, ReduceOp::kSum), "ring_wire");
  EXPECT_EQ(chosen("fp32", "auto", 3), "none");
  EXPECT_EQ(chosen("bf16", "auto", 1), "none");
  EXPECT_EQ(chosen("bf16", "auto", 3, OpKind::kBroadcast), "none");
  EXPECT_EQ(chosen("bf16", "auto", 3, OpKind::kAllreduce, DataType::kFloat16), "none");
  EXPECT_EQ(chosen("bf16", "auto", 3, OpKind::kAllreduce, DataType::kFloat32, ReduceOp::kMax), "none");
  EXPECT_EQ(chosen("bf16", "auto", 3, OpKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 1024), "none");
  EXPECT_EQ(chosen("int8", "auto", 3, OpKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 1 << 20,
                   "allreduce=ring"), "none");
  EXPECT_EQ(chosen("int8", "auto", 3, OpKind::kReduceScatter, DataType::kFloat32, ReduceOp::kSum, 1 << 20,
                   "allreduce=ring"), "pairwise_int8");
}

}  // namespace
}  // namespace mccl::test
