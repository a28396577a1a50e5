// MCCL_WIRE_DTYPE=int8: the codec (one byte per value, a float32 scale per
// group of 256), and float32 SUM/AVG all-reduce and reduce-scatter on it.
// Every rank ends bit-identical; the error against a float64 reference stays
// within half a quantization step of every input's group (and of the
// result's), at odd and even world sizes and prime counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "harness.h"
#include "wire_runs.h"
#include "reduce/wire_int8.h"

namespace mccl::test {
namespace {

using kernels::int8WireBytes;
using kernels::kInt8Group;

float input(int rank, size_t i) {
  // Distinct per rank; magnitudes vary by group so that scales differ.
  uint32_t h = static_cast<uint32_t>(rank + 7) * 2654435761u ^ static_cast<uint32_t>(i) * 2246822519u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  const float unit = static_cast<float>(h % 65536) / 32768.0f - 1.0f;  // [-1, 1)
  return unit * static_cast<float>(1 + (i / kInt8Group) % 5);
}

std::vector<float> roundTrip(const std::vector<float>& x) {
  std::vector<uint8_t> wire(int8WireBytes(x.size()));
  kernels::toInt8Wire(wire.data(), x.data(), x.size());
  std::vector<float> y(x.size());
  kernels::fromInt8Wire(y.data(), wire.data(), x.size());
  return y;
}

// Half a quantization step of the group holding element i of x.
double halfStep(const std::vector<float>& x, size_t i) {
  const size_t g0 = i / kInt8Group * kInt8Group;
  double amax = 0;
  for (size_t j = g0; j < std::min(x.size(), g0 + kInt8Group); ++j) amax = std::max(amax, std::fabs(double(x[j])));
  return amax / 127.0 / 2.0;
}

TEST(Int8Wire, EncodesOneBytePerValueAndAScalePerGroup) {
  EXPECT_EQ(int8WireBytes(0), 0u);
  EXPECT_EQ(int8WireBytes(1), 5u);
  EXPECT_EQ(int8WireBytes(256), 260u);
  EXPECT_EQ(int8WireBytes(257), 265u);

  // One group: the largest magnitude maps to +-127, the rest in proportion.
  std::vector<float> x = {2.54f, -1.27f, 0.0f, 0.01f, 0.015f, -2.54f};
  std::vector<uint8_t> wire(int8WireBytes(x.size()));
  kernels::toInt8Wire(wire.data(), x.data(), x.size());
  float scale;
  std::memcpy(&scale, wire.data(), 4);
  EXPECT_FLOAT_EQ(scale, 0.02f);
  const auto* q = reinterpret_cast<const int8_t*>(wire.data() + 4);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);  // -63.5 rounds to even
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[3], 0);    // 0.5 rounds to even
  EXPECT_EQ(q[4], 1);    // 0.75
  EXPECT_EQ(q[5], -127);

  // Every value within half a step of its group; partial last group.
  for (size_t n : {size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{1031}}) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = input(0, i);
    std::vector<float> y = roundTrip(v);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(double(y[i]) - v[i]), halfStep(v, i) * (1 + 1e-6)) << "n=" << n << " i=" << i;
    }
    // Decoding again and re-adding gives the same values (addInt8Wire).
    std::vector<uint8_t> w(int8WireBytes(n));
    kernels::toInt8Wire(w.data(), v.data(), n);
    std::vector<float> acc(n, 0.0f);
    kernels::addInt8Wire(acc.data(), w.data(), n);
    ASSERT_EQ(std::memcmp(acc.data(), y.data(), n * 4), 0);
  }
}

TEST(Int8Wire, ZeroGroupsAreExactAndNonFiniteGroupsDecodeAsNan) {
  std::vector<float> x(600, 0.0f);
  x[300] = std::numeric_limits<float>::infinity();  // group 1
  x[520] = std::numeric_limits<float>::quiet_NaN(); // group 2
  x[530] = 3.0f;
  std::vector<float> y = roundTrip(x);
  for (size_t i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << i;
  for (size_t i = 256; i < 600; ++i) ASSERT_TRUE(std::isnan(y[i])) << i;
}

TEST(Int8Wire, TinyGroupsAndHugeFloat64ValuesStayFinite) {
  // 127 / max|x| overflows float below about 3.7e-37: such groups still
  // round-trip within half a step, with no NaN.
  std::vector<float> tiny(300);
  for (size_t i = 0; i < tiny.size(); ++i) tiny[i] = static_cast<float>((static_cast<int>(i % 7) - 3) * 1e-39);
  tiny[5] = 0.0f;
  std::vector<float> y = roundTrip(tiny);
  for (size_t i = 0; i < tiny.size(); ++i) {
    ASSERT_FALSE(std::isnan(y[i])) << i;
    ASSERT_LE(std::fabs(double(y[i]) - tiny[i]), halfStep(tiny, i) * (1 + 1e-6) + 1e-45) << i;
  }
  ASSERT_EQ(y[5], 0.0f);
  // float64 beyond float32's range travels as +-FLT_MAX, its group finite.
  std::vector<double> big(10, 1.0);
  big[3] = 1e300;
  big[4] = -1e300;
  std::vector<uint8_t> wire(int8WireBytes(big.size()));
  kernels::toInt8Wire(wire.data(), big.data(), big.size());
  std::vector<double> back(big.size());
  kernels::fromInt8Wire(back.data(), wire.data(), big.size());
  for (double v : back) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NEAR(back[3], std::numeric_limits<float>::max(), std::numeric_limits<float>::max() * 1e-6);
  EXPECT_NEAR(back[4], -std::numeric_limits<float>::max(), std::numeric_limits<float>::max() * 1e-6);
}

TEST(Int8Wire, AllreduceIsBitIdenticalAndWithinHalfAStepPerInput) {
  for (int n : {2, 3, 5, 8}) {
    for (size_t count : {size_t{1}, size_t{13}, size_t{257}, size_t{1031}, size_t{100003}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        const std::string what = strCat("int8 n=", n, " count=", count, " ", reduceOpName(op));
        WireRun<float> run;
        // int8 is pairwise whatever MCCL_WIRE_REDUCE says
        allreduceOnWire<float>(n, count, op, DataType::kFloat32, {"int8", "ring"}, input, run);
        for (int r = 0; r < n; ++r) {
          ASSERT_NE(run.desc[static_cast<size_t>(r)].find("algorithm=pairwise_int8) wire=int8"), std::string::npos)
              << what << ": " << run.desc[static_cast<size_t>(r)];
          ASSERT_EQ(std::memcmp(run.out[static_cast<size_t>(r)].data(), run.out[0].data(), count * 4), 0)
              << what << ": rank " << r << " differs from rank 0";
        }
        // Each input is off by at most half its group's step; the result by
        // half the result's step; float32 sums by n ulps of the magnitude.
        std::vector<std::vector<float>> ins(static_cast<size_t>(n), std::vector<float>(count));
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) ins[static_cast<size_t>(r)][i] = input(r, i);
        }
        const std::vector<float>& got = run.out[0];
        double worst = 0;
        for (size_t i = 0; i < count; ++i) {
          double sum = 0, mag = 0, bound = 0;
          for (int r = 0; r < n; ++r) {
            sum += ins[static_cast<size_t>(r)][i];
            mag += std::fabs(double(ins[static_cast<size_t>(r)][i]));
            bound += halfStep(ins[static_cast<size_t>(r)], i);
          }
          const double div = op == ReduceOp::kAvg ? n : 1;
          bound = bound / div + halfStep(got, i) + n * std::ldexp(mag / div, -23);
          const double err = std::fabs(got[i] - sum / div);
          ASSERT_LE(err, bound * (1 + 1e-6)) << what << " at " << i;
          worst = std::max(worst, err);
        }
        if (count >= 257) {
          EXPECT_GT(worst, 0.0) << what << ": nothing was quantized";
        }
      }
    }
  }
}

TEST(Int8Wire, ReduceScatterIsWithinHalfAStepPerInput) {
  for (int n : {2, 3, 7}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{1031}, size_t{20011}}) {
      const std::string what = strCat("int8 reduce_scatter n=", n, " count=", count);
      std::vector<std::string> desc(static_cast<size_t>(n));
      std::mutex mu;
      runRanks(n, [&](Communicator& comm) {
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
        o.op = ReduceOp::kSum;
        auto work = reduceScatter(comm, o);
        work->wait();
        // Rank q's block r, as q encodes it (groups from the block's start).
        const int me = comm.rank();
        std::vector<std::vector<float>> theirs(static_cast<size_t>(n), std::vector<float>(count));
        for (int q = 0; q < n; ++q) {
          for (size_t j = 0; j < count; ++j) theirs[static_cast<size_t>(q)][j] = input(q, me * count + j);
        }
        for (size_t i = 0; i < count; ++i) {
          double sum = 0, bound = 0, mag = 0;
          for (int q = 0; q < n; ++q) {
            const std::vector<float>& blk = theirs[static_cast<size_t>(q)];
            sum += blk[i];
            mag += std::fabs(double(blk[i]));
            if (q != me) bound += halfStep(blk, i);  // the owner's own input is exact
          }
          bound += n * std::ldexp(mag, -23);
          ASSERT_LE(std::fabs(out[i] - sum), bound * (1 + 1e-6)) << what << " rank " << me << " at " << i;
        }
        std::lock_guard<std::mutex> lock(mu);
        desc[static_cast<size_t>(comm.rank())] = work->description();
      }, [&](CommConfig& c) {
        c.wireDtype = "int8";
        c.wireDtypeMinBytes = 0;
        c.chunkBytes = 4096;
      });
      EXPECT_NE(desc[0].find("algorithm=pairwise_int8) wire=int8"), std::string::npos) << what << ": " << desc[0];
    }
  }
}

}  // namespace
}  // namespace mccl::test
