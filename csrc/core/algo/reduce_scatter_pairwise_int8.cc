// Reduce-scatter of float32 on the int8 wire (MCCL_WIRE_DTYPE=int8,
// reduce/wire_int8.h), by the pairwise exchange of algo/pairwise_coded.h:
// each rank's input block is encoded once (groups of 256 counted from the
// block's start) and summed in float32 by its owner, whose own input stays
// exact. The error does not grow with n; the bytes are about a quarter of
// the float32 ring's.
#include "algo/pairwise_coded.h"

namespace mccl::algo {

Task reduceScatterPairwiseInt8(OpContext& ctx, ReduceScatterOptions o) {
  const char* what = "int8 wire reduce-scatter";
  if (o.dtype == DataType::kFloat64) return reduceScatterPairwiseCoded<double>(ctx, o, WireInt8{}, what);
  return reduceScatterPairwiseCoded<float>(ctx, o, WireInt8{}, what);
}

}  // namespace mccl::algo
