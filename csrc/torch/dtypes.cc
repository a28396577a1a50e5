#include "dtypes.h"

#include <c10/util/Exception.h>
#include <torch/version.h>

namespace mccl::torch_adapter {

namespace {

// c10d renamed NCCLPreMulSumSupplement to PreMulSumSupplement (2.13 keeps
// the old name as an alias; 2.11 has only the old one).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
using PreMulSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSupplement = c10d::NCCLPreMulSumSupplement;
#endif

}  // namespace

std::string dtypeLabel(at::ScalarType type) {
  switch (type) {
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    case at::kComplexHalf: return "complex32";
    case at::kUInt16: return "uint16";
    case at::kUInt32: return "uint32";
    case at::kUInt64: return "uint64";
    default: break;
  }
  size_t per;
  try {
    return dtypeName(coreDtype(type, "", &per));
  } catch (const c10::Error&) {
    return c10::toString(type);
  }
}

DataType coreDtype(at::ScalarType type, const std::string& who, size_t* perElement) {
  *perElement = 1;
  switch (type) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUInt8;
    case at::kShort: return DataType::kInt16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kBool: return DataType::kBool;
    case at::kComplexFloat: *perElement = 2; return DataType::kFloat32;
    case at::kComplexDouble: *perElement = 2; return DataType::kFloat64;
    case at::kComplexHalf: *perElement = 2; return DataType::kFloat16;
    default: break;
  }
  TORCH_CHECK_TYPE(false, who, ": dtype ", dtypeLabel(type),
                   " is not supported (supported: float32, float64, float16, bfloat16, int8, "
                   "uint8, int16, int32, int64, bool, and complex as pairs of floats)");
}

CoreReduce coreReduce(const c10d::ReduceOp& op, at::ScalarType type, const std::string& who) {
  CoreReduce r;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = ReduceOp::kSum; break;
    case c10d::ReduceOp::AVG: r.op = ReduceOp::kAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = ReduceOp::kProduct; break;
    case c10d::ReduceOp::MIN: r.op = ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: r.op = ReduceOp::kMax; break;
    case c10d::ReduceOp::BAND: r.op = ReduceOp::kBAnd; break;
    case c10d::ReduceOp::BOR: r.op = ReduceOp::kBOr; break;
    case c10d::ReduceOp::BXOR: r.op = ReduceOp::kBXor; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.op = ReduceOp::kPreMulSum;
      auto* s = dynamic_cast<PreMulSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(s != nullptr, who, ": PREMUL_SUM without a factor");
      if (s->tensor_factor.defined()) {
        TORCH_CHECK_VALUE(s->tensor_factor.numel() == 1, who,
                          ": PREMUL_SUM factor must have one element");
        at::Tensor f = s->tensor_factor.detach().cpu();
        if (f.is_complex()) {
          // The core multiplies by a real factor; dropping the imaginary
          // part would give a wrong sum without a word.
          const c10::complex<double> z = f.to(at::kComplexDouble).item<c10::complex<double>>();
          TORCH_CHECK_VALUE(z.imag() == 0.0, who, ": PREMUL_SUM factor ", z.real(), (z.imag() < 0 ? "" : "+"),
                            z.imag(), "j is complex; MCCL multiplies by real factors only (scale the tensor ",
                            "by it first, then reduce with SUM)");
          r.premulFactor = z.real();
        } else {
          r.premulFactor = f.to(at::kDouble).item<double>();
        }
      } else {
        r.premulFactor = s->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK_VALUE(false, who, ": unknown reduce op ", static_cast<int>(op.op_));
  }
  if (at::isComplexType(type)) {
    // Complex numbers travel as (re, im) pairs: only element-wise linear ops apply.
    TORCH_CHECK_TYPE(r.op == ReduceOp::kSum || r.op == ReduceOp::kAvg || r.op == ReduceOp::kPreMulSum,
                     who, ": reduce op ", reduceOpName(r.op),
                     " is not defined for complex tensors (use SUM, AVG or PREMUL_SUM)");
    return r;
  }
  size_t per;
  std::string why = reduceRefusal(coreDtype(type, who, &per), r.op);
  TORCH_CHECK_TYPE(why.empty(), who, ": ", why);
  return r;
}

}  // namespace mccl::torch_adapter
