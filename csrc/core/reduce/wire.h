// Wire dtypes for reductions (MCCL_WIRE_DTYPE): float32 partial sums travel
// as bfloat16 or float16 and are accumulated in float32 by the receiver.
//
// Conversions round to nearest even. float16 guards against overflow by
// saturating: a finite value beyond its range (|x| > 65504) travels as
// +-65504 rather than as infinity, and is counted (saturations()); NaN and
// infinity stay what they are. bfloat16 has float32's range and never
// saturates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mccl::kernels {

// kInt8 is the int8 wire of reduce/wire_int8.h (its own functions); the
// conversions below are for the 16-bit dtypes.
enum class WireDtype : uint8_t { kFp32, kBf16, kFp16, kInt8 };

// "fp32", "bf16", "fp16", "int8".
const char* wireDtypeName(WireDtype w);
// Parses a name above; false when it is none of them.
bool parseWireDtype(const std::string& name, WireDtype* out);

// out[i] = wire(in[i]).
void toWire(uint16_t* out, const float* in, size_t n, WireDtype w);
// out[i] = float(in[i]).
void fromWire(float* out, const uint16_t* in, size_t n, WireDtype w);
// acc[i] += float(in[i]).
void addWire(float* acc, const uint16_t* in, size_t n, WireDtype w);

// The same for float64 values, accumulated in float64: a value goes to
// float32 first (rounded to nearest even; beyond float32's range it becomes
// infinity) and then to the wire dtype.
void toWire(uint16_t* out, const double* in, size_t n, WireDtype w);
void fromWire(double* out, const uint16_t* in, size_t n, WireDtype w);
void addWire(double* acc, const uint16_t* in, size_t n, WireDtype w);

// float16 saturations in this process so far.
uint64_t saturations();

}  // namespace mccl::kernels
