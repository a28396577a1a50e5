#include "reduce/wire.h"

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

}  // namespace

const char* wireDtypeName(WireDtype w) {
  switch (w) {
    case WireDtype::kFp32: return "fp32";
    case WireDtype::kBf16: return "bf16";
    case WireDtype::kFp16: return "fp16";
  }
  return "?";
}

bool parseWireDtype(const std::string& name, WireDtype* out) {
  for (WireDtype w : {WireDtype::kFp32, WireDtype::kBf16, WireDtype::kFp16}) {
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
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = halfToFloat(in[i]);
  }
}

void addWire(float* acc, const uint16_t* in, size_t n, WireDtype w) {
  if (w == WireDtype::kBf16) {
    for (size_t i = 0; i < n; ++i) acc[i] += bf16ToFloat(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] += halfToFloat(in[i]);
  }
}

uint64_t saturations() { return gSaturations.load(std::memory_order_relaxed); }

}  // namespace mccl::kernels
