// All-reduce of float32 whose data travel in a 16-bit wire dtype
// (MCCL_WIRE_DTYPE=bf16|fp16, MCCL_WIRE_REDUCE=pairwise): half the bytes of
// allreduce_ring.cc on every link, and an error that does not grow with the
// number of ranks. Every block's sum is its owner's float32 values plus n-1
// inputs rounded once each; no partial sum is ever rounded (a ring that
// sends partial sums rounds a growing sum at every hop: its error grows with
// n like a 16-bit sum's, bf16_compress_hook's). The exchange itself is
// algo/pairwise_coded.h.
#include "algo/pairwise_coded.h"

namespace mccl::algo {

Task allreducePairwiseWire(OpContext& ctx, AllreduceOptions o) {
  const Wire16 w{wireDtypeOf(ctx.config())};
  const char* what = "wire dtype all-reduce";
  if (o.dtype == DataType::kFloat64) return allreducePairwiseCoded<double>(ctx, o, w, what);
  return allreducePairwiseCoded<float>(ctx, o, w, what);
}

}  // namespace mccl::algo
