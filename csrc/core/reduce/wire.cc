#include "reduce/wire.h"

#include <algorithm>
#include <atomic>
#include <bit>

#include "reduce/half.h"

namespace mccl::kernels {
namespace {

std::atomic<uint64_t> gSaturations{0};

constexpr uint16_t kHalfMax = 0x7bffu;  // 65504

// float16 with saturation of finite overflow; returns whether it saturated.
inline uint16_t toHalfSaturating(float f, bool* saturated) {
  const uint16_t h = floatToHalf(f);
  // floatToHalf gives infinity (0x7c00, sign aside) for finite overflow.
  if ((h & 0x7fffu) == 0x7c00u && (std::bit_cast<uint32_t>(f) & 0x7f800000u) != 0x7f800000u) {
    *saturated = true;
    return static_cast<uint16_t>((h & 0x8000u) | kHalfMax);
  }
  return h;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MCCL_WIRE_F16C 1
#include <immintrin.h>

// float16 through the F16C instructions (Intel since 2012, AMD since 2011),
// eight lanes at a time; the caller checks the CPU has them. Finite values
// that would round to infinity are clamped to +-65504 first (and counted);
// infinity and NaN pass.
__attribute__((target("avx2,f16c"))) uint64_t toHalfF16c(uint16_t* out, const float* in, size_t n) {
  const __m256 limit = _mm256_set1_ps(65504.0f);
  const __m256 neg = _mm256_set1_ps(-65504.0f);
  const __m256 roundsToInf = _mm256_set1_ps(65520.0f);  // the first value fp16 rounds to infinity
  const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 fltMax = _mm256_set1_ps(3.402823466e38f);
  uint64_t saturated = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(in + i);
    const __m256 mag = _mm256_and_ps(x, absMask);
    // finite and too large: |x| >= 65520 and |x| <= FLT_MAX (NaN compares false)
    const __m256 over = _mm256_and_ps(_mm256_cmp_ps(mag, roundsToInf, _CMP_GE_OQ),
                                      _mm256_cmp_ps(mag, fltMax, _CMP_LE_OQ));
    const int bits = _mm256_movemask_ps(over);
    if (bits != 0) {
      saturated += static_cast<uint64_t>(__builtin_popcount(static_cast<unsigned>(bits)));
      x = _mm256_blendv_ps(x, _mm256_min_ps(_mm256_max_ps(x, neg), limit), over);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) {
    bool s = false;
    out[i] = toHalfSaturating(in[i], &s);
    saturated += s ? 1 : 0;
  }
  return saturated;
}

__attribute__((target("avx2,f16c"))) void fromHalfF16c(float* out, const uint16_t* in, size_t n, bool add) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    if (add) x = _mm256_add_ps(x, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, x);
  }
  for (; i < n; ++i) out[i] = add ? out[i] + halfToFloat(in[i]) : halfToFloat(in[i]);
}

bool haveF16c() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return have;
}
#endif

}  // namespace

const char* wireDtypeName(WireDtype w) {
  switch (w) {
    case WireDtype::kFp32: return "fp32";
    case WireDtype::kBf16: return "bf16";
    case WireDtype::kFp16: return "fp16";
    case WireDtype::kInt8: return "int8";
  }
  return "?";
}

bool parseWireDtype(const std::string& name, WireDtype* out) {
  for (WireDtype w : {WireDtype::kFp32, WireDtype::kBf16, WireDtype::kFp16, WireDtype::kInt8}) {
    if (name == wireDtypeName(w)) {
      *out = w;
      return true;
    }
  }
  return false;
}

void toWire(uint16_t* out, const float* in, size_t n, WireDtype w) {
  if (w == WireDtype::kBf16) {
    for (size_t i = 0; i < n; ++i) out[i] = floatToBf16(in[i]);
    return;
  }
#ifdef MCCL_WIRE_F16C
  if (haveF16c()) {
    if (uint64_t count = toHalfF16c(out, in, n); count > 0) gSaturations.fetch_add(count, std::memory_order_relaxed);
    return;
  }
#endif
  bool saturated = false;
  uint64_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    bool s = false;
    out[i] = toHalfSaturating(in[i], &s);
    count += s ? 1 : 0;
    saturated = saturated || s;
  }
  if (saturated) gSaturations.fetch_add(count, std::memory_order_relaxed);
}

void fromWire(float* out, const uint16_t* in, size_t n, WireDtype w) {
  if (w == WireDtype::kBf16) {
    for (size_t i = 0; i < n; ++i) out[i] = bf16ToFloat(in[i]);
    return;
  }
#ifdef MCCL_WIRE_F16C
  if (haveF16c()) return fromHalfF16c(out, in, n, /*add=*/false);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = halfToFloat(in[i]);
}

void addWire(float* acc, const uint16_t* in, size_t n, WireDtype w) {
  if (w == WireDtype::kBf16) {
    for (size_t i = 0; i < n; ++i) acc[i] += bf16ToFloat(in[i]);
    return;
  }
#ifdef MCCL_WIRE_F16C
  if (haveF16c()) return fromHalfF16c(acc, in, n, /*add=*/true);
#endif
  for (size_t i = 0; i < n; ++i) acc[i] += halfToFloat(in[i]);
}

namespace {
constexpr size_t kStage = 1024;  // float64 values converted through float32 this many at a time
}  // namespace

void toWire(uint16_t* out, const double* in, size_t n, WireDtype w) {
  float tmp[kStage];
  for (size_t i = 0; i < n; i += kStage) {
    const size_t m = std::min(kStage, n - i);
    for (size_t j = 0; j < m; ++j) tmp[j] = static_cast<float>(in[i + j]);
    toWire(out + i, tmp, m, w);
  }
}

void fromWire(double* out, const uint16_t* in, size_t n, WireDtype w) {
  float tmp[kStage];
  for (size_t i = 0; i < n; i += kStage) {
    const size_t m = std::min(kStage, n - i);
    fromWire(tmp, in + i, m, w);
    for (size_t j = 0; j < m; ++j) out[i + j] = tmp[j];
  }
}

void addWire(double* acc, const uint16_t* in, size_t n, WireDtype w) {
  float tmp[kStage];
  for (size_t i = 0; i < n; i += kStage) {
    const size_t m = std::min(kStage, n - i);
    fromWire(tmp, in + i, m, w);
    for (size_t j = 0; j < m; ++j) acc[i + j] += tmp[j];
  }
}

uint64_t saturations() { return gSaturations.load(std::memory_order_relaxed); }

}  // namespace mccl::kernels
