// IEEE binary16 and bfloat16 conversions, round-to-nearest-even.
//
// Plain integer arithmetic so that loops over arrays vectorise; the
// binary16 conversion follows the well-known "magic number" formulation
// (denormals through a float add, normals through a bias add).
#pragma once

#include <bit>
#include <cstdint>

namespace mccl::kernels {

inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t floatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t out;
  constexpr uint32_t kF32Inf = 255u << 23;
  constexpr uint32_t kF16Overflow = (127u + 16u) << 23;  // 2^16
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  if (x >= kF16Overflow) {
    out = (x > kF32Inf) ? 0x7e00u : 0x7c00u;  // NaN stays NaN, else inf
  } else if (x < (113u << 23)) {
    // Result is subnormal or zero: let the FPU round by adding a magic value.
    float r = std::bit_cast<float>(x) + std::bit_cast<float>(kDenormMagic);
    out = std::bit_cast<uint32_t>(r) - kDenormMagic;
  } else {
    const uint32_t mantOdd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xfffu;  // rebias exponent, round half up
    x += mantOdd;                        // ... then ties to even
    out = x >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

inline float bf16ToFloat(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t floatToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace mccl::kernels
