// Reduction kernels: every dtype x op against an independent reference, on a
// prime length (so vector tails are exercised), in place and out of place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reduce/half.h"
#include "reduce/reduce.h"
#include "util/error.h"

namespace mccl {
namespace {

using kernels::bf16ToFloat;
using kernels::floatToBf16;
using kernels::floatToHalf;
using kernels::halfToFloat;

constexpr size_t kLen = 1031;

// Reference bf16 rounding: nearest of the two neighbours, ties to even.
uint16_t refBf16(float f) {
  if (std::isnan(f)) return floatToBf16(f);
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t lo = static_cast<uint16_t>(x >> 16);
  uint16_t hi = static_cast<uint16_t>(lo + 1);
  double dl = std::fabs(static_cast<double>(bf16ToFloat(lo)) - f);
  double dh = std::fabs(static_cast<double>(bf16ToFloat(hi)) - f);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Half, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    ASSERT_EQ(floatToHalf(f), h) << "half 0x" << std::hex << h;
  }
}

#if defined(__FLT16_MAX__)
TEST(Half, FloatToHalfMatchesCompiler) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(floatToHalf(f), rb) << "float " << f;
  }
  // Halfway cases between neighbouring halves round to even.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    double mid = (static_cast<double>(halfToFloat(static_cast<uint16_t>(h))) +
                  halfToFloat(static_cast<uint16_t>(h + 1))) / 2;
    float f = static_cast<float>(mid);
    if (static_cast<double>(f) != mid) continue;
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(floatToHalf(f), rb) << "midpoint after 0x" << std::hex << h;
  }
}
#endif

TEST(BFloat16, MatchesReferenceRounding) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f) || std::isinf(f)) continue;
    if (std::fabs(f) > 3.0e38f) continue;  // rounding may overflow to inf
    ASSERT_EQ(floatToBf16(f), refBf16(f)) << "float " << f;
  }
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

// Reference semantics in wide arithmetic.
template <typename C>
C refOp(ReduceOp op, C a, C b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kPreMulSum: return a + b;
    case ReduceOp::kProduct: return a * b;
    case ReduceOp::kMin: return std::isnan(static_cast<double>(a)) ? a : (std::isnan(static_cast<double>(b)) ? b : std::min(a, b));
    case ReduceOp::kMax: return std::isnan(static_cast<double>(a)) ? a : (std::isnan(static_cast<double>(b)) ? b : std::max(a, b));
    default: break;
  }
  return 0;
}

template <typename T>
void checkInteger(DataType dt) {
  std::mt19937_64 rng(static_cast<uint64_t>(dt) + 1);
  std::vector<T> a(kLen), b(kLen), out(kLen);
  for (size_t i = 0; i < kLen; ++i) {
    a[i] = static_cast<T>(rng());
    b[i] = static_cast<T>(rng());
  }
  for (int o = 0; o < kNumReduceOps; ++o) {
    ReduceOp op = static_cast<ReduceOp>(o);
    if (!reduceSupported(dt, op)) continue;
    auto fn = kernels::combineFn(dt, op);
    fn(out.data(), a.data(), b.data(), kLen);
    for (size_t i = 0; i < kLen; ++i) {
      using U = std::make_unsigned_t<T>;
      U ua = static_cast<U>(a[i]), ub = static_cast<U>(b[i]);
      T expect;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: expect = static_cast<T>(static_cast<U>(ua + ub)); break;
        case ReduceOp::kProduct: expect = static_cast<T>(static_cast<U>(static_cast<uint64_t>(ua) * ub)); break;
        case ReduceOp::kMin: expect = std::min(a[i], b[i]); break;
        case ReduceOp::kMax: expect = std::max(a[i], b[i]); break;
        case ReduceOp::kBAnd: expect = static_cast<T>(a[i] & b[i]); break;
        case ReduceOp::kBOr: expect = static_cast<T>(a[i] | b[i]); break;
        case ReduceOp::kBXor: expect = static_cast<T>(a[i] ^ b[i]); break;
        default: FAIL();
      }
      ASSERT_EQ(out[i], expect) << dtypeName(dt) << " " << reduceOpName(op) << " at " << i;
    }
    // In place (out aliases a).
    std::vector<T> inplace = a;
    fn(inplace.data(), inplace.data(), b.data(), kLen);
    EXPECT_EQ(inplace, out) << dtypeName(dt) << " " << reduceOpName(op) << " in place";
  }
  // AVG finalisation truncates toward zero; divisors larger than the type fit.
  std::vector<T> v = a;
  kernels::divide(v.data(), kLen, dt, 300);
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(v[i], static_cast<T>(static_cast<int64_t>(a[i]) / 300));
}

TEST(Kernels, Integers) {
  checkInteger<int8_t>(DataType::kInt8);
  checkInteger<uint8_t>(DataType::kUInt8);
  checkInteger<int16_t>(DataType::kInt16);
  checkInteger<int32_t>(DataType::kInt32);
  checkInteger<int64_t>(DataType::kInt64);
}

TEST(Kernels, Bool) {
  std::vector<uint8_t> a(kLen), b(kLen), out(kLen);
  for (size_t i = 0; i < kLen; ++i) {
    a[i] = (i % 3) == 0;
    b[i] = (i % 5) < 2;
  }
  struct Case { ReduceOp op; int kind; };  // 0 or, 1 and, 2 xor
  for (Case c : {Case{ReduceOp::kSum, 0}, Case{ReduceOp::kMax, 0}, Case{ReduceOp::kBOr, 0},
                 Case{ReduceOp::kProduct, 1}, Case{ReduceOp::kMin, 1}, Case{ReduceOp::kBAnd, 1},
                 Case{ReduceOp::kBXor, 2}}) {
    kernels::combineFn(DataType::kBool, c.op)(out.data(), a.data(), b.data(), kLen);
    for (size_t i = 0; i < kLen; ++i) {
      uint8_t e = c.kind == 0 ? (a[i] | b[i]) : c.kind == 1 ? (a[i] & b[i]) : (a[i] ^ b[i]);
      ASSERT_EQ(out[i], e) << reduceOpName(c.op);
    }
  }
  EXPECT_FALSE(reduceSupported(DataType::kBool, ReduceOp::kAvg));
  EXPECT_THROW(kernels::combineFn(DataType::kBool, ReduceOp::kAvg), Error);
}

template <typename T>
void checkFloat(DataType dt) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> dist(-100, 100);
  std::vector<T> a(kLen), b(kLen), out(kLen);
  for (size_t i = 0; i < kLen; ++i) {
    a[i] = static_cast<T>(dist(rng));
    b[i] = static_cast<T>(dist(rng));
  }
  a[5] = std::numeric_limits<T>::quiet_NaN();
  b[9] = std::numeric_limits<T>::quiet_NaN();
  for (int o = 0; o < kNumReduceOps; ++o) {
    ReduceOp op = static_cast<ReduceOp>(o);
    if (!reduceSupported(dt, op)) continue;
    kernels::combineFn(dt, op)(out.data(), a.data(), b.data(), kLen);
    for (size_t i = 0; i < kLen; ++i) {
      T e = refOp<T>(op, a[i], b[i]);
      if (std::isnan(e)) {
        ASSERT_TRUE(std::isnan(out[i])) << reduceOpName(op) << " at " << i;
      } else {
        ASSERT_EQ(out[i], e) << reduceOpName(op) << " at " << i;
      }
    }
  }
  EXPECT_THROW(kernels::combineFn(dt, ReduceOp::kBXor), Error);
  std::vector<T> s(kLen);
  kernels::scale(s.data(), b.data(), kLen, dt, 0.25);
  for (size_t i = 0; i < kLen; ++i) {
    if (!std::isnan(b[i])) {
      ASSERT_EQ(s[i], static_cast<T>(b[i] * static_cast<T>(0.25)));
    }
  }
  std::vector<T> d = a;
  kernels::divide(d.data(), kLen, dt, 7);
  for (size_t i = 0; i < kLen; ++i) {
    if (!std::isnan(a[i])) {
      ASSERT_EQ(d[i], static_cast<T>(a[i] / static_cast<T>(7)));
    }
  }
}

TEST(Kernels, Float32And64) {
  checkFloat<float>(DataType::kFloat32);
  checkFloat<double>(DataType::kFloat64);
}

// 16-bit floats: computed in fp32 and rounded once.
void checkHalfLike(DataType dt, float (*toF)(uint16_t), uint16_t (*fromF)(float)) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-60, 60);
  std::vector<uint16_t> a(kLen), b(kLen), out(kLen);
  for (size_t i = 0; i < kLen; ++i) {
    a[i] = fromF(dist(rng));
    b[i] = fromF(dist(rng));
  }
  for (int o = 0; o < kNumReduceOps; ++o) {
    ReduceOp op = static_cast<ReduceOp>(o);
    if (!reduceSupported(dt, op)) continue;
    kernels::combineFn(dt, op)(out.data(), a.data(), b.data(), kLen);
    for (size_t i = 0; i < kLen; ++i) {
      ASSERT_EQ(out[i], fromF(refOp<float>(op, toF(a[i]), toF(b[i]))))
          << dtypeName(dt) << " " << reduceOpName(op) << " at " << i;
    }
  }
  std::vector<uint16_t> d = a;
  kernels::divide(d.data(), kLen, dt, 3);
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(d[i], fromF(toF(a[i]) / 3.0f));
}

TEST(Kernels, Float16AndBFloat16) {
  checkHalfLike(DataType::kFloat16, halfToFloat, floatToHalf);
  checkHalfLike(DataType::kBFloat16, bf16ToFloat, floatToBf16);
}

TEST(Kernels, SupportMatrix) {
  for (int d = 0; d < kNumDataTypes; ++d) {
    DataType dt = static_cast<DataType>(d);
    EXPECT_TRUE(reduceSupported(dt, ReduceOp::kSum));
    EXPECT_TRUE(reduceSupported(dt, ReduceOp::kMax));
    EXPECT_EQ(reduceSupported(dt, ReduceOp::kBXor), !isFloating(dt));
    EXPECT_EQ(reduceSupported(dt, ReduceOp::kPreMulSum), isFloating(dt));
  }
}

}  // namespace
}  // namespace mccl
