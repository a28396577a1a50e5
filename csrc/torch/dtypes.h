// Torch's dtypes and reduce ops as the core sees them (util/dtype.h): the
// one mapping of the c10d adapter.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>

#include "util/dtype.h"

namespace mccl::torch_adapter {

// The core dtype for a tensor dtype; complex types travel as pairs of their
// real type. Throws TypeError naming `who` (op and rank) for anything else.
DataType coreDtype(at::ScalarType type, const std::string& who, size_t* perElement);
// "float32", "complex64", ... (torch's names without the "torch." prefix).
std::string dtypeLabel(at::ScalarType type);

struct CoreReduce {
  ReduceOp op = ReduceOp::kSum;
  double premulFactor = 1.0;
};
// Throws TypeError naming `who` when `op` cannot apply to `type`.
CoreReduce coreReduce(const c10d::ReduceOp& op, at::ScalarType type, const std::string& who);

}  // namespace mccl::torch_adapter
