// The int8 wire (MCCL_WIRE_DTYPE=int8): float32 values travel as one signed
// byte each plus one float32 scale per group of 256 values, a little over a
// quarter of float32's bytes (260 per 256 values).
//
// A group of m <= 256 values is encoded as its scale s = max|x| / 127
// (4 bytes, native byte order: every supported host is little-endian) and
// then m bytes q[i] = round(x[i] / s) in [-127, 127] (ties to even; computed
// as x[i] * (127 / max|x|)); decoded, x[i] ~ q[i] * s. An all-zero group has
// s = 0. A group holding NaN or infinity decodes as NaN throughout (int8
// cannot carry them; a scaler that checks for non-finite gradients still
// sees them).
//
// Encoding is deterministic, and decoding is the same arithmetic everywhere,
// so a value encoded once decodes bit-identically on every rank.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mccl::kernels {

constexpr size_t kInt8Group = 256;
constexpr size_t kInt8GroupBytes = kInt8Group + sizeof(float);

// Bytes that n values take on the int8 wire.
constexpr size_t int8WireBytes(size_t n) {
  return n + sizeof(float) * ((n + kInt8Group - 1) / kInt8Group);
}

// Encodes n values, grouped from in[0], into int8WireBytes(n) bytes.
void toInt8Wire(uint8_t* out, const float* in, size_t n);
// out[i] = decoded value i.
void fromInt8Wire(float* out, const uint8_t* in, size_t n);
// acc[i] += decoded value i.
void addInt8Wire(float* acc, const uint8_t* in, size_t n);

// The same for float64 values (the same wire: a group's values are rounded
// to float32 before encoding, finite ones beyond its range to +-FLT_MAX;
// decoded values are accumulated in float64).
void toInt8Wire(uint8_t* out, const double* in, size_t n);
void fromInt8Wire(double* out, const uint8_t* in, size_t n);
void addInt8Wire(double* acc, const uint8_t* in, size_t n);

}  // namespace mccl::kernels
