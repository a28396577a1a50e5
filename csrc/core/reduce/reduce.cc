#include "reduce/reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "reduce/half.h"
#include "util/check.h"

namespace mccl::kernels {
namespace {

// Storage wrappers so one template covers native and 16-bit float types.
struct Half { uint16_t bits; };
struct BFloat { uint16_t bits; };

template <typename T> struct Compute { using type = T; };
template <> struct Compute<Half> { using type = float; };
template <> struct Compute<BFloat> { using type = float; };

template <typename T>
inline typename Compute<T>::type load(T v) {
  if constexpr (std::is_same_v<T, Half>) return halfToFloat(v.bits);
  else if constexpr (std::is_same_v<T, BFloat>) return bf16ToFloat(v.bits);
  else return v;
}

template <typename T>
inline T store(typename Compute<T>::type v) {
  if constexpr (std::is_same_v<T, Half>) return Half{floatToHalf(v)};
  else if constexpr (std::is_same_v<T, BFloat>) return BFloat{floatToBf16(v)};
  else return v;
}

// Signed integer SUM/PRODUCT wrap (two's complement) instead of overflowing
// into undefined behaviour, matching what torch computes on CPU.
template <typename C>
inline C wrapAdd(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename C>
inline C wrapMul(C a, C b) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
    using U = std::make_unsigned_t<C>;
    // Promote to at least unsigned int so that uint16*uint16 cannot overflow int.
    using P = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<C>(static_cast<U>(static_cast<P>(static_cast<U>(a)) *
                                         static_cast<P>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

// NaN wins in MIN and MAX, as in torch.minimum / torch.maximum.
template <typename C>
inline C minOf(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return a != a ? a : (b != b ? b : (b < a ? b : a));
  } else {
    return b < a ? b : a;
  }
}

template <typename C>
inline C maxOf(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return a != a ? a : (b != b ? b : (a < b ? b : a));
  } else {
    return a < b ? b : a;
  }
}

struct SumOp { template <typename C> static C apply(C a, C b) { return wrapAdd(a, b); } };
struct ProdOp { template <typename C> static C apply(C a, C b) { return wrapMul(a, b); } };
struct MinOp { template <typename C> static C apply(C a, C b) { return minOf(a, b); } };
struct MaxOp { template <typename C> static C apply(C a, C b) { return maxOf(a, b); } };
struct AndOp { template <typename C> static C apply(C a, C b) { return a & b; } };
struct OrOp { template <typename C> static C apply(C a, C b) { return a | b; } };
struct XorOp { template <typename C> static C apply(C a, C b) { return a ^ b; } };

template <typename T, typename Op>
void combine(void* out, const void* a, const void* b, size_t count) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) {
    o[i] = store<T>(Op::apply(load(x[i]), load(y[i])));
  }
}

// Bool is stored as one byte holding 0 or 1: SUM/MAX/BOR are OR,
// PRODUCT/MIN/BAND are AND, BXOR is XOR. Results stay 0 or 1.
CombineFn boolFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBOr: return &combine<uint8_t, OrOp>;
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBAnd: return &combine<uint8_t, AndOp>;
    case ReduceOp::kBXor: return &combine<uint8_t, XorOp>;
    default: return nullptr;
  }
}

template <typename T>
CombineFn numberFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kPreMulSum: return &combine<T, SumOp>;
    case ReduceOp::kProduct: return &combine<T, ProdOp>;
    case ReduceOp::kMin: return &combine<T, MinOp>;
    case ReduceOp::kMax: return &combine<T, MaxOp>;
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceOp::kBAnd: return &combine<T, AndOp>;
      case ReduceOp::kBOr: return &combine<T, OrOp>;
      case ReduceOp::kBXor: return &combine<T, XorOp>;
      default: break;
    }
  }
  return nullptr;
}

template <typename T>
void divideT(void* buf, size_t count, int64_t divisor) {
  T* p = static_cast<T*>(buf);
  using C = typename Compute<T>::type;
  if constexpr (std::is_integral_v<C>) {
    // Divide in 64 bits: the group size need not fit in an int8.
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<C>(static_cast<int64_t>(p[i]) / divisor);
  } else {
    const C d = static_cast<C>(divisor);
    for (size_t i = 0; i < count; ++i) p[i] = store<T>(load(p[i]) / d);
  }
}

template <typename T>
void scaleT(void* out, const void* in, size_t count, double factor) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(in);
  using C = typename Compute<T>::type;
  const C f = static_cast<C>(factor);
  for (size_t i = 0; i < count; ++i) o[i] = store<T>(load(x[i]) * f);
}

}  // namespace

CombineFn combineFn(DataType dtype, ReduceOp op) {
  MCCL_USAGE_CHECK(reduceSupported(dtype, op), "reduce op ", reduceOpName(op),
                   " is not supported for dtype ", dtypeName(dtype));
  CombineFn fn = nullptr;
  switch (dtype) {
    case DataType::kFloat32: fn = numberFn<float>(op); break;
    case DataType::kFloat64: fn = numberFn<double>(op); break;
    case DataType::kFloat16: fn = numberFn<Half>(op); break;
    case DataType::kBFloat16: fn = numberFn<BFloat>(op); break;
    case DataType::kInt8: fn = numberFn<int8_t>(op); break;
    case DataType::kUInt8: fn = numberFn<uint8_t>(op); break;
    case DataType::kInt16: fn = numberFn<int16_t>(op); break;
    case DataType::kInt32: fn = numberFn<int32_t>(op); break;
    case DataType::kInt64: fn = numberFn<int64_t>(op); break;
    case DataType::kBool: fn = boolFn(op); break;
  }
  MCCL_CHECK(fn != nullptr, "no kernel for ", dtypeName(dtype), " ", reduceOpName(op));
  return fn;
}

void divide(void* buf, size_t count, DataType dtype, int64_t divisor) {
  MCCL_CHECK(divisor > 0);
  switch (dtype) {
    case DataType::kFloat32: return divideT<float>(buf, count, divisor);
    case DataType::kFloat64: return divideT<double>(buf, count, divisor);
    case DataType::kFloat16: return divideT<Half>(buf, count, divisor);
    case DataType::kBFloat16: return divideT<BFloat>(buf, count, divisor);
    case DataType::kInt8: return divideT<int8_t>(buf, count, divisor);
    case DataType::kUInt8: return divideT<uint8_t>(buf, count, divisor);
    case DataType::kInt16: return divideT<int16_t>(buf, count, divisor);
    case DataType::kInt32: return divideT<int32_t>(buf, count, divisor);
    case DataType::kInt64: return divideT<int64_t>(buf, count, divisor);
    case DataType::kBool: break;
  }
  throwError(ErrorKind::kUsage, "AVG is not supported for dtype ", dtypeName(dtype));
}

void scale(void* out, const void* in, size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kFloat32: return scaleT<float>(out, in, count, factor);
    case DataType::kFloat64: return scaleT<double>(out, in, count, factor);
    case DataType::kFloat16: return scaleT<Half>(out, in, count, factor);
    case DataType::kBFloat16: return scaleT<BFloat>(out, in, count, factor);
    default: break;
  }
  throwError(ErrorKind::kUsage, "PREMUL_SUM is not supported for dtype ", dtypeName(dtype));
}

}  // namespace mccl::kernels
