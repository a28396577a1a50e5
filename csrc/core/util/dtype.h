// Element types and reduction operators understood by the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mccl {

// Values travel in frame headers: append only, never renumber.
enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt16 = 6,
  kInt32 = 7,
  kInt64 = 8,
  kBool = 9,
};
constexpr int kNumDataTypes = 10;

// Values travel in frame headers: append only, never renumber.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kAvg = 1,
  kProduct = 2,
  kMin = 3,
  kMax = 4,
  kBAnd = 5,
  kBOr = 6,
  kBXor = 7,
  kPreMulSum = 8,
};
constexpr int kNumReduceOps = 9;

size_t dtypeSize(DataType dtype);
const char* dtypeName(DataType dtype);
const char* reduceOpName(ReduceOp op);
bool isFloating(DataType dtype);
bool isValidDataType(uint8_t raw);
bool isValidReduceOp(uint8_t raw);

// Whether `op` is defined on `dtype`: bitwise ops need integers or bool;
// AVG needs a number type (integers divide truncating toward zero);
// PREMUL_SUM needs a floating type. The support matrix in
// the README is checked against this function.
bool reduceSupported(DataType dtype, ReduceOp op);
// Why `op` cannot apply to `dtype` ("reduce op BAND is not supported for
// dtype float32 (bitwise ops need integer or bool tensors)"); empty when it can.
// The one wording of this refusal, for the core and the adapters.
std::string reduceRefusal(DataType dtype, ReduceOp op);

}  // namespace mccl
