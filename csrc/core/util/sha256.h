// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), used by the connection
// handshake to prove knowledge of the per-job secret without sending it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mccl {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t bufLen_ = 0;
  uint64_t totalLen_ = 0;
};

Digest sha256(const void* data, size_t len);
Digest hmacSha256(const void* key, size_t keyLen, const void* msg, size_t msgLen);

// Compares in time independent of where the inputs differ.
bool constantTimeEqual(const void* a, const void* b, size_t len);

}  // namespace mccl
