// All-reduce of float32 on the int8 wire (MCCL_WIRE_DTYPE=int8,
// reduce/wire_int8.h): about a quarter of allreduce_ring.cc's bytes on every
// link.
//
// The pairwise exchange of algo/pairwise_coded.h on whole groups of 256
// values counted from element 0: every rank encodes each of its values
// exactly once, whichever block they fall in (the owner's own values are
// encoded and decoded like everyone else's), so a rank's contribution is
// exactly mccl.hooks.int8_round_trip of its buffer and a hook can keep that
// round trip's residual for error feedback. Partial sums are never encoded,
// so the error does not grow with n; the owner encodes the final block once
// and every rank ends bit-identical.
#include "algo/pairwise_coded.h"

namespace mccl::algo {

Task allreducePairwiseInt8(OpContext& ctx, AllreduceOptions o) {
  const char* what = "int8 wire all-reduce";
  if (o.dtype == DataType::kFloat64) return allreducePairwiseCoded<double>(ctx, o, WireInt8{}, what);
  return allreducePairwiseCoded<float>(ctx, o, WireInt8{}, what);
}

}  // namespace mccl::algo
