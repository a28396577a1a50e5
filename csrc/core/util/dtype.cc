#include "util/dtype.h"

namespace mccl {

size_t dtypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt8: return 1;
    case DataType::kUInt8: return 1;
    case DataType::kInt16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kBool: return 1;
  }
  return 0;
}

const char* dtypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt8: return "int8";
    case DataType::kUInt8: return "uint8";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kBool: return "bool";
  }
  return "invalid-dtype";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kAvg: return "AVG";
    case ReduceOp::kProduct: return "PRODUCT";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kBAnd: return "BAND";
    case ReduceOp::kBOr: return "BOR";
    case ReduceOp::kBXor: return "BXOR";
    case ReduceOp::kPreMulSum: return "PREMUL_SUM";
  }
  return "invalid-op";
}

bool isFloating(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

bool isValidDataType(uint8_t raw) { return raw < kNumDataTypes; }
bool isValidReduceOp(uint8_t raw) { return raw < kNumReduceOps; }

bool reduceSupported(DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return true;
    case ReduceOp::kAvg:
      return dtype != DataType::kBool;
    case ReduceOp::kPreMulSum:
      return isFloating(dtype);
    case ReduceOp::kBAnd:
    case ReduceOp::kBOr:
    case ReduceOp::kBXor:
      return !isFloating(dtype);
  }
  return false;
}

std::string reduceRefusal(DataType dtype, ReduceOp op) {
  if (reduceSupported(dtype, op)) return {};
  std::string why = std::string("reduce op ") + reduceOpName(op) + " is not supported for dtype " +
                    dtypeName(dtype);
  if (op == ReduceOp::kBAnd || op == ReduceOp::kBOr || op == ReduceOp::kBXor) {
    why += " (bitwise ops need integer or bool tensors)";
  } else if (op == ReduceOp::kPreMulSum) {
    why += " (PREMUL_SUM needs a floating dtype)";
  } else if (op == ReduceOp::kAvg) {
    why += " (AVG needs a number type)";
  }
  return why;
}

}  // namespace mccl
