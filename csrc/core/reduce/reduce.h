// Element-wise reduction kernels, type-erased so templates stay out of
// headers (as Gloo's allreduce.h does with its ReductionFunction).
//
// All functions are pure and thread-safe; they run on whatever thread runs
// the op's algorithm (the engine thread, a caller's thread for small ops, a
// connection thread that resumed it) and on reduce helpers (parallel.h). fp16 and bf16 are computed in fp32 and rounded
// once per combine.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/dtype.h"

namespace mccl::kernels {

// out[i] = a[i] (op) b[i]. `out` may alias `a` or `b` exactly (not partially).
// AVG combines as SUM (finalise with divide()); PREMUL_SUM combines as SUM
// (inputs are pre-scaled with scale()).
using CombineFn = void (*)(void* out, const void* a, const void* b, size_t count);

// The kernel for (dtype, op); throws a usage error when reduceSupported() is
// false for the pair.
CombineFn combineFn(DataType dtype, ReduceOp op);

// buf[i] = buf[i] / divisor (AVG). Integers divide truncating toward zero.
void divide(void* buf, size_t count, DataType dtype, int64_t divisor);

// out[i] = in[i] * factor (PREMUL_SUM); floating types only. out may alias in.
void scale(void* out, const void* in, size_t count, DataType dtype, double factor);

}  // namespace mccl::kernels
