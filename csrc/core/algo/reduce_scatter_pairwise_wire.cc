// Reduce-scatter of float32 whose inputs travel in a 16-bit wire dtype
// (MCCL_WIRE_DTYPE=bf16|fp16), by pairwise exchange (algo/pairwise_coded.h):
// every output is the owner's float32 input plus n-1 inputs rounded once
// each, so the error does not grow with n (a ring of rounded partial sums'
// would). Each step is a permutation of the ranks; the bytes are the ring's
// at half the width.
#include "algo/pairwise_coded.h"

namespace mccl::algo {

Task reduceScatterPairwiseWire(OpContext& ctx, ReduceScatterOptions o) {
  const Wire16 w{wireDtypeOf(ctx.config())};
  const char* what = "wire dtype reduce-scatter";
  if (o.dtype == DataType::kFloat64) return reduceScatterPairwiseCoded<double>(ctx, o, w, what);
  return reduceScatterPairwiseCoded<float>(ctx, o, w, what);
}

}  // namespace mccl::algo
