// Reduce-scatter of float32 on the int8 wire (MCCL_WIRE_DTYPE=int8,
// reduce/wire_int8.h), by the pairwise exchange of
// reduce_scatter_pairwise_wire.cc: at step k (1..n-1) rank r sends its input
// block r+k, encoded once (groups of 256 counted from the block's start), to
// that block's owner, and adds rank r-k's decoded block r into its float32
// output, which starts from its own input exactly. The error does not grow
// with n; the bytes are about a quarter of the float32 ring's.
#include <algorithm>

#include "algo/common.h"
#include "reduce/reduce.h"
#include "reduce/wire_int8.h"

namespace mccl::algo {

Task reduceScatterPairwiseInt8(OpContext& ctx, ReduceScatterOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.dtype == DataType::kFloat32 && (o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg),
             "int8 wire reduce-scatter: float32 SUM or AVG only");
  auto* out = static_cast<float*>(o.out);
  auto in = [&](int block) { return static_cast<const float*>(o.in[static_cast<size_t>(block)]); };
  if (o.count > 0 && out != in(r)) std::copy(in(r), in(r) + o.count, out);
  if (n == 1) co_return;
  using kernels::kInt8Group;
  using kernels::kInt8GroupBytes;
  const size_t groups = (o.count + kInt8Group - 1) / kInt8Group;
  const size_t nch = chunksFor(groups, kInt8GroupBytes, ctx.config().chunkBytes);
  const size_t steps = static_cast<size_t>(n - 1);
  const size_t stepBytes = kernels::int8WireBytes(o.count);
  struct Span {
    size_t begin, len, wireOff, bytes;
  };
  auto span = [&](size_t c) {
    Chunk ch = chunkOf(groups, nch, c);
    const size_t e0 = std::min(ch.begin * kInt8Group, o.count);
    const size_t e1 = std::min((ch.begin + ch.length) * kInt8Group, o.count);
    return Span{e0, e1 - e0, ch.begin * kInt8GroupBytes, kernels::int8WireBytes(e1 - e0)};
  };
  // Step k's area, sent and received: [(k-1) * stepBytes, k * stepBytes).
  Scratch recvMem = ctx.scratch(steps * stepBytes), sendMem = ctx.scratch(steps * stepBytes);

  std::vector<std::shared_ptr<RecvRequest>> recvs(steps * nch);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = span(c);
      recvs[(k - 1) * nch + c] = ctx.irecv(mod(r - static_cast<int>(k), n), slotId((k - 1) * nch + c),
                                           recvMem.data() + (k - 1) * stepBytes + sp.wireOff, sp.bytes);
    }
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(steps * nch);
  constexpr size_t kWindow = 1;  // as in reduce_scatter_pairwise_wire.cc
  auto sendStep = [&](size_t k) {
    const int dst = mod(r + static_cast<int>(k), n);
    for (size_t c = 0; c < nch; ++c) {
      Span sp = span(c);
      uint8_t* wire = sendMem.data() + (k - 1) * stepBytes + sp.wireOff;
      kernels::toInt8Wire(wire, in(dst) + sp.begin, sp.len);
      sends.push_back(ctx.isend(dst, slotId((k - 1) * nch + c), wire, sp.bytes));
    }
  };
  for (size_t k = 1; k <= std::min(steps, kWindow); ++k) sendStep(k);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = span(c);
      co_await ctx.wait(recvs[(k - 1) * nch + c]);
      kernels::addInt8Wire(out + sp.begin, recvMem.data() + (k - 1) * stepBytes + sp.wireOff, sp.len);
    }
    if (k + kWindow <= steps) sendStep(k + kWindow);
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(out, o.count, DataType::kFloat32, n);
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
