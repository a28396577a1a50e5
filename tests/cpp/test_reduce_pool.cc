// Reductions split across helper threads (reduce/parallel.h): bit-identical
// to one call for every dtype and op, at counts around the part boundaries,
// from several callers at once, and with no helper at all.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::kernels {
namespace {

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed, DataType dt) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  if (dt == DataType::kBool) {
    for (auto& b : v) b &= 1;
  }
  if (dt == DataType::kFloat32 || dt == DataType::kFloat64 || dt == DataType::kFloat16 ||
      dt == DataType::kBFloat16) {
    // Finite values only: clear each element's top exponent bit.
    const size_t es = dtypeSize(dt);
    for (size_t i = es - 1; i < n; i += es) v[i] &= 0x3F;
  }
  return v;
}

TEST(ReducePool, PartsGiveTheSameBitsAsOneCall) {
  ReducePool pool(3, 64);  // tiny parts: every count above 64 bytes splits
  for (int d = 0; d < kNumDataTypes; ++d) {
    const auto dt = static_cast<DataType>(d);
    const size_t es = dtypeSize(dt);
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto op = static_cast<ReduceOp>(o);
      if (!reduceSupported(dt, op)) continue;
      const CombineFn fn = combineFn(dt, op);
      for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1031},
                           size_t{100003}}) {
        auto a = randomBytes(count * es, 7 + static_cast<uint32_t>(count), dt);
        auto b = randomBytes(count * es, 11 + static_cast<uint32_t>(count), dt);
        std::vector<uint8_t> want(count * es), got(count * es);
        fn(want.data(), a.data(), b.data(), count);
        pool.combine(fn, got.data(), a.data(), b.data(), count, es);
        EXPECT_EQ(got, want) << dtypeName(dt) << " " << reduceOpName(op) << " count " << count;
        // In place, as the algorithms call it.
        pool.combine(fn, a.data(), a.data(), b.data(), count, es);
        EXPECT_EQ(a, want) << "in place, " << dtypeName(dt) << " " << reduceOpName(op);
      }
    }
  }
}

TEST(ReducePool, ManyCallersAtOnceAndNoHelpers) {
  ReducePool pool(2, 4096);
  ReducePool none(0);
  EXPECT_EQ(none.helpers(), 0);
  const size_t count = 1 << 18;
  const CombineFn fn = combineFn(DataType::kFloat32, ReduceOp::kSum);
  std::vector<std::thread> callers;
  std::vector<int> ok(6, 0);
  for (int t = 0; t < 6; ++t) {
    callers.emplace_back([&, t] {
      std::vector<float> a(count, static_cast<float>(t)), b(count, 1.0f);
      for (int round = 0; round < 20; ++round) {
        (t % 2 ? pool : none).combine(fn, a.data(), a.data(), b.data(), count, sizeof(float));
      }
      ok[static_cast<size_t>(t)] = a.front() == t + 20.0f && a.back() == t + 20.0f;
    });
  }
  for (auto& c : callers) c.join();
  for (int t = 0; t < 6; ++t) EXPECT_TRUE(ok[static_cast<size_t>(t)]) << "caller " << t;
}

}  // namespace
}  // namespace mccl::kernels
