// Reduce-scatter of float32 whose inputs travel in a 16-bit wire dtype
// (MCCL_WIRE_DTYPE=bf16|fp16), by pairwise exchange: at step k (1..n-1) rank
// r sends its input block r+k, rounded once, to that block's owner and adds
// rank r-k's rounded input block r into its float32 output. Every output is
// the owner's float32 input plus n-1 inputs rounded once each: the error does
// not grow with n (a ring of rounded partial sums' would). Each step is a
// permutation of the ranks; the bytes are the ring's at half the width.
#include <algorithm>

#include "algo/common.h"
#include "reduce/reduce.h"
#include "reduce/wire.h"

namespace mccl::algo {

Task reduceScatterPairwiseWire(OpContext& ctx, ReduceScatterOptions o, kernels::WireDtype w) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.dtype == DataType::kFloat32 && (o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg),
             "wire dtype reduce-scatter: float32 SUM or AVG only");
  auto* out = static_cast<float*>(o.out);
  auto in = [&](int block) { return static_cast<const float*>(o.in[static_cast<size_t>(block)]); };
  if (o.count > 0 && out != in(r)) std::copy(in(r), in(r) + o.count, out);
  if (n == 1) co_return;
  constexpr size_t ws = sizeof(uint16_t);
  const size_t nch = chunksFor(o.count, ws, ctx.config().chunkBytes);
  const size_t steps = static_cast<size_t>(n - 1);
  // Step k's area, sent and received: [(k-1) * count, k * count).
  Scratch recvMem = ctx.scratch(steps * o.count * ws), sendMem = ctx.scratch(steps * o.count * ws);
  auto* recvWire = reinterpret_cast<uint16_t*>(recvMem.data());
  auto* sendWire = reinterpret_cast<uint16_t*>(sendMem.data());

  std::vector<std::shared_ptr<RecvRequest>> recvs(steps * nch);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      recvs[(k - 1) * nch + c] = ctx.irecv(mod(r - static_cast<int>(k), n), slotId((k - 1) * nch + c),
                                           recvWire + (k - 1) * o.count + ch.begin, ch.length * ws);
    }
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(steps * nch);
  constexpr size_t kWindow = 1;  // steps whose sends may be ahead of arrivals
  auto sendStep = [&](size_t k) {
    const int dst = mod(r + static_cast<int>(k), n);
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      uint16_t* wire = sendWire + (k - 1) * o.count + ch.begin;
      kernels::toWire(wire, in(dst) + ch.begin, ch.length, w);
      sends.push_back(ctx.isend(dst, slotId((k - 1) * nch + c), wire, ch.length * ws));
    }
  };
  for (size_t k = 1; k <= std::min(steps, kWindow); ++k) sendStep(k);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      co_await ctx.wait(recvs[(k - 1) * nch + c]);
      kernels::addWire(out + ch.begin, recvWire + (k - 1) * o.count + ch.begin, ch.length, w);
    }
    if (k + kWindow <= steps) sendStep(k + kWindow);
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(out, o.count, DataType::kFloat32, n);
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
