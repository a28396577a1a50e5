#include "reduce/wire_int8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

// On x86-64 Linux the entry points are built twice, for AVX2 and for the
// baseline, and the loader picks one for the CPU (about 3x faster encoding
// with AVX2). Both clones do the same IEEE operations (no FMA), so ranks on
// different CPUs encode and decode the same bits.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define MCCL_INT8_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MCCL_INT8_CLONES
#endif

namespace mccl::kernels {
namespace {

// Round to nearest even through float addition: exact for |v| < 2^22, and
// the quotients here are within [-127, 127]. Vectorizes without SSE4.1's
// round instruction, and gives the same bits on every IEEE machine.
[[gnu::always_inline]] inline float roundEven(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// Largest |x| as float bits (integer compare: for non-negative floats the
// bit patterns order as the values, and NaN and infinity compare above
// every finite value).
[[gnu::always_inline]] inline uint32_t maxAbsBits(const float* x, size_t m) {
  uint32_t best = 0;
  for (size_t i = 0; i < m; ++i) best = std::max(best, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return best;
}

// Below 2^-96 (float bits 0x0f800000), 127 / amax overflows float.
constexpr uint32_t kTinyBits = 0x0f800000u;

[[gnu::always_inline]] inline void encodeGroup(uint8_t* out, const float* x, size_t m) {
  const uint32_t bits = maxAbsBits(x, m);
  float scale;
  auto* q = reinterpret_cast<int8_t*>(out + sizeof(float));
  if (bits >= 0x7f800000u) {  // infinity or NaN somewhere
    scale = std::numeric_limits<float>::quiet_NaN();
    std::memset(q, 0, m);
  } else if (bits == 0) {
    scale = 0.0f;
    std::memset(q, 0, m);
  } else if (bits < kTinyBits) {
    // 127 / amax would overflow float: the same quotients in double.
    const double amax = std::bit_cast<float>(bits);
    scale = static_cast<float>(amax / 127.0);
    for (size_t i = 0; i < m; ++i) {
      const double v = std::clamp(std::nearbyint(x[i] * (127.0 / amax)), -127.0, 127.0);
      q[i] = static_cast<int8_t>(static_cast<int>(v));
    }
  } else {
    const float amax = std::bit_cast<float>(bits);
    scale = amax / 127.0f;
    // Near FLT_MAX, 127 * scale can round up to infinity: one ulp less.
    if (std::isinf(scale * 127.0f)) scale = std::nextafter(scale, 0.0f);
    const float inv = 127.0f / amax;
    for (size_t i = 0; i < m; ++i) {
      const float v = std::clamp(roundEven(x[i] * inv), -127.0f, 127.0f);
      q[i] = static_cast<int8_t>(static_cast<int>(v));
    }
  }
  std::memcpy(out, &scale, sizeof(float));
}

template <bool kAdd>
[[gnu::always_inline]] inline void decode(float* out, const uint8_t* in, size_t n) {
  for (size_t g = 0; g < n; g += kInt8Group) {
    const size_t m = std::min(kInt8Group, n - g);
    float scale;
    std::memcpy(&scale, in, sizeof(float));
    const auto* q = reinterpret_cast<const int8_t*>(in + sizeof(float));
    float* o = out + g;
    for (size_t i = 0; i < m; ++i) {
      const float v = static_cast<float>(q[i]) * scale;
      if constexpr (kAdd) {
        o[i] += v;
      } else {
        o[i] = v;
      }
    }
    in += sizeof(float) + m;
  }
}

}  // namespace

MCCL_INT8_CLONES void toInt8Wire(uint8_t* out, const float* in, size_t n) {
  for (size_t g = 0; g < n; g += kInt8Group) {
    const size_t m = std::min(kInt8Group, n - g);
    encodeGroup(out, in + g, m);
    out += sizeof(float) + m;
  }
}

MCCL_INT8_CLONES void fromInt8Wire(float* out, const uint8_t* in, size_t n) { decode<false>(out, in, n); }

MCCL_INT8_CLONES void addInt8Wire(float* acc, const uint8_t* in, size_t n) { decode<true>(acc, in, n); }

void toInt8Wire(uint8_t* out, const double* in, size_t n) {
  float tmp[kInt8Group];
  for (size_t g = 0; g < n; g += kInt8Group) {
    const size_t m = std::min(kInt8Group, n - g);
    // Finite values beyond float32's range travel as its largest value.
    constexpr double kMax = std::numeric_limits<float>::max();
    for (size_t i = 0; i < m; ++i) {
      const double v = in[g + i];
      tmp[i] = static_cast<float>(std::isfinite(v) ? std::clamp(v, -kMax, kMax) : v);
    }
    encodeGroup(out, tmp, m);
    out += sizeof(float) + m;
  }
}

void fromInt8Wire(double* out, const uint8_t* in, size_t n) {
  float tmp[kInt8Group];
  for (size_t g = 0; g < n; g += kInt8Group) {
    const size_t m = std::min(kInt8Group, n - g);
    decode<false>(tmp, in, m);
    for (size_t i = 0; i < m; ++i) out[g + i] = tmp[i];
    in += sizeof(float) + m;
  }
}

void addInt8Wire(double* acc, const uint8_t* in, size_t n) {
  float tmp[kInt8Group];
  for (size_t g = 0; g < n; g += kInt8Group) {
    const size_t m = std::min(kInt8Group, n - g);
    decode<false>(tmp, in, m);
    for (size_t i = 0; i < m; ++i) acc[g + i] += tmp[i];
    in += sizeof(float) + m;
  }
}

}  // namespace mccl::kernels
