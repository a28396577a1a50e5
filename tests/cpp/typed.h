// Typed test data: per-rank distinct values stored in any MCCL dtype, and
// float64 / exact-integer references to compare against.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reduce/half.h"
#include "util/dtype.h"

namespace mccl::test {

inline void put(DataType dt, void* p, size_t i, double v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = kernels::floatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(p)[i] = kernels::floatToBf16(static_cast<float>(v)); break;
    case DataType::kInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int64_t>(v)); break;
    case DataType::kUInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case DataType::kInt16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(static_cast<int64_t>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case DataType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::kBool: static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
  }
}

inline double get(DataType dt, const void* p, size_t i) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(p)[i];
    case DataType::kFloat64: return static_cast<const double*>(p)[i];
    case DataType::kFloat16: return kernels::halfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16: return kernels::bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kInt8: return static_cast<const int8_t*>(p)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(p)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kBool: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

// The value rank r contributes at element i (of a buffer with `salt`):
// small integers, so sums, products, min and max are exact in every dtype;
// products use only +-1 and 2 so they stay small.
inline double value(DataType dt, ReduceOp op, int r, size_t i, int salt = 0) {
  if (dt == DataType::kBool) return ((r * 5 + i * 3 + salt) % 4) == 0 ? 1 : 0;
  int64_t h = static_cast<int64_t>((r + 1) * 7919 + i * 104729 + static_cast<size_t>(salt) * 31);
  if (op == ReduceOp::kProduct) {
    int k = static_cast<int>(h % 3);
    return k == 0 ? 1 : (k == 1 ? -1 : 2);
  }
  if (op == ReduceOp::kBAnd || op == ReduceOp::kBOr || op == ReduceOp::kBXor) return static_cast<double>(h % 97);
  double v = static_cast<double>(h % 13) - 6;
  if (dt == DataType::kUInt8) v = static_cast<double>(h % 13);
  return v;
}

struct Buffer {
  Buffer(DataType dt, size_t count) : dtype(dt), n(count), bytes(count * dtypeSize(dt) + 1) {}
  void* data() { return bytes.data(); }
  double at(size_t i) const { return get(dtype, bytes.data(), i); }
  void set(size_t i, double v) { put(dtype, bytes.data(), i, v); }
  DataType dtype;
  size_t n;
  std::vector<uint8_t> bytes;
};

// Folds the contributions of ranks 0..n-1 at element i with `op`.
inline double reference(DataType dt, ReduceOp op, int n, size_t i, int salt = 0,
                        double premul = 1.0) {
  bool isInt = !isFloating(dt) && dt != DataType::kBool;
  double acc = 0;
  int64_t iacc = 0;
  for (int r = 0; r < n; ++r) {
    double v = value(dt, op, r, i, salt);
    if (op == ReduceOp::kPreMulSum) v *= premul;
    int64_t iv = static_cast<int64_t>(v);
    if (r == 0) {
      acc = v;
      iacc = iv;
      continue;
    }
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: case ReduceOp::kPreMulSum: acc += v; iacc += iv; break;
      case ReduceOp::kProduct: acc *= v; iacc *= iv; break;
      case ReduceOp::kMin: acc = std::min(acc, v); iacc = std::min(iacc, iv); break;
      case ReduceOp::kMax: acc = std::max(acc, v); iacc = std::max(iacc, iv); break;
      case ReduceOp::kBAnd: iacc &= iv; break;
      case ReduceOp::kBOr: iacc |= iv; break;
      case ReduceOp::kBXor: iacc ^= iv; break;
    }
  }
  if (dt == DataType::kBool) {
    // Bool: SUM/MAX/BOR are OR, PRODUCT/MIN/BAND are AND, BXOR is XOR.
    int64_t r = static_cast<int64_t>(value(dt, op, 0, i, salt));
    for (int k = 1; k < n; ++k) {
      int64_t v = static_cast<int64_t>(value(dt, op, k, i, salt));
      if (op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kBOr) r |= v;
      else if (op == ReduceOp::kBXor) r ^= v;
      else r &= v;
    }
    return static_cast<double>(r);
  }
  if (op == ReduceOp::kAvg) return isInt ? static_cast<double>(iacc / n) : acc / n;
  if (isInt || op == ReduceOp::kBAnd || op == ReduceOp::kBOr || op == ReduceOp::kBXor) {
    return static_cast<double>(iacc);
  }
  return acc;
}

// Tolerance: exact except where the dtype must round (AVG, PREMUL_SUM).
inline bool close(DataType dt, ReduceOp op, double got, double want) {
  if (op != ReduceOp::kAvg && op != ReduceOp::kPreMulSum) return got == want;
  double tol = dt == DataType::kFloat64 ? 1e-12 : dt == DataType::kFloat32 ? 1e-5
              : dt == DataType::kFloat16 ? 2e-3 : dt == DataType::kBFloat16 ? 1e-2 : 0;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

}  // namespace mccl::test
