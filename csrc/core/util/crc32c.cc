#include "util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#endif

namespace mccl {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = makeTable();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crcHardware(const uint8_t* p, size_t len,
                                                      uint32_t crc) {
  uint64_t c = ~crc;
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; len > 0; --len, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}
bool hardwareAvailable() { return __builtin_cpu_supports("sse4.2"); }
constexpr const char* kHardwareName = "sse4.2";
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
uint32_t crcHardware(const uint8_t* p, size_t len, uint32_t crc) {
  uint32_t c = ~crc;
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __crc32cd(c, v);
  }
  for (; len > 0; --len, ++p) c = __crc32cb(c, *p);
  return ~c;
}
bool hardwareAvailable() { return true; }
constexpr const char* kHardwareName = "armv8-crc";
#else
uint32_t crcHardware(const uint8_t*, size_t, uint32_t crc) { return crc; }
bool hardwareAvailable() { return false; }
constexpr const char* kHardwareName = "table";
#endif

const bool kUseHardware = hardwareAvailable();

}  // namespace

uint32_t crc32cPortable(const void* data, size_t len, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < len; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(const void* data, size_t len, uint32_t crc) {
  if (kUseHardware) return crcHardware(static_cast<const uint8_t*>(data), len, crc);
  return crc32cPortable(data, len, crc);
}

const char* crc32cImplementation() { return kUseHardware ? kHardwareName : "table"; }

}  // namespace mccl
