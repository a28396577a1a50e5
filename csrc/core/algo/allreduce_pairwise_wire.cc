// All-reduce of float32 whose data travel in a 16-bit wire dtype
// (MCCL_WIRE_DTYPE=bf16|fp16, MCCL_WIRE_REDUCE=pairwise): half the bytes of
// allreduce_ring.cc on every link, and an error that does not grow with the
// number of ranks.
//
// Reduce-scatter by pairwise exchange: at step k (1..n-1) rank r sends its
// own values of block r+k, rounded once to the wire dtype, to that block's
// owner, and receives rank r-k's values of block r, which it adds (as
// float32) into its own. So every block's sum is its owner's float32 values
// plus n-1 inputs rounded once each; no partial sum is ever rounded. (A ring
// that sends partial sums rounds a growing sum at every hop: its error grows
// with n like a 16-bit sum's, bf16_compress_hook's.) Each step is a
// permutation of the ranks, so every link carries one flow each way, and the
// bytes are the ring's: (n-1)/n of the buffer out and in.
//
// All-gather around the ring: the owner rounds its final block once,
// replaces its own float32 copy with that rounding, and the ring forwards
// those 16-bit values unchanged: every rank ends bit-identical.
//
// A wire-format mirror of the buffer holds what is sent; all-gather data
// lands in it and is converted into the user's buffer. A region of the mirror
// sent during the reduce-scatter (block b, to its owner) is overwritten only
// by block b's final values, which cannot exist before the owner received
// this rank's contribution.
#include <algorithm>

#include "algo/common.h"
#include "reduce/reduce.h"
#include "reduce/wire.h"

namespace mccl::algo {

Task allreducePairwiseWire(OpContext& ctx, AllreduceOptions o, kernels::WireDtype w) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.dtype == DataType::kFloat32 && (o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg),
             "wire dtype all-reduce: float32 SUM or AVG only");
  auto* buf = static_cast<float*>(o.buf);
  if (n == 1) co_return;

  constexpr size_t ws = sizeof(uint16_t);
  const Partition blocks(o.count, n);
  const size_t nch = chunksFor(blocks.maxLength(), ws, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  auto slot = [&](size_t phase, size_t step, size_t c) {
    return slotId((phase * steps + step) * nch + c);
  };
  Scratch mirrorMem = ctx.scratch(o.count * ws);
  auto* mirror = reinterpret_cast<uint16_t*>(mirrorMem.data());
  struct Span {
    float* f;
    uint16_t* wire;
    size_t len;
  };
  auto at = [&](int block, size_t c) {
    Chunk ch = chunkOf(blocks.length(block), nch, c);
    const size_t off = blocks.offset(block) + ch.begin;
    return Span{buf + off, mirror + off, ch.length};
  };

  // Reduce-scatter receives: step k's contribution to this rank's block, in
  // its own area ([k-1] * slotElems * nch), posted up front.
  const size_t slotElems = blocks.maxLength() / nch + 1;
  Scratch inMem = ctx.scratch(steps * nch * slotElems * ws);
  auto* in = reinterpret_cast<uint16_t*>(inMem.data());
  auto inAt = [&](size_t k, size_t c) { return in + ((k - 1) * nch + c) * slotElems; };
  std::vector<std::shared_ptr<RecvRequest>> rs(steps * nch);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      rs[(k - 1) * nch + c] = ctx.irecv(mod(r - static_cast<int>(k), n), slot(0, k - 1, c), inAt(k, c),
                                        at(r, c).len * ws);
    }
  }
  std::vector<std::shared_ptr<RecvRequest>> ag(steps * nch);
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = at(mod(r - static_cast<int>(t) - 1, n), c);
      ag[t * nch + c] = ctx.irecv(left, slot(1, t, c), sp.wire, sp.len * ws);
    }
  }

  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(2 * steps * nch);
  // Step k+1's sends go once step k has arrived: one flow out and one in at
  // a time, however large the group (two steps ahead measured slower on the
  // 1 Gbit/s lab).
  constexpr size_t kWindow = 1;
  auto sendStep = [&](size_t k) {
    const int dst = mod(r + static_cast<int>(k), n);
    for (size_t c = 0; c < nch; ++c) {
      Span sp = at(dst, c);
      kernels::toWire(sp.wire, sp.f, sp.len, w);
      sends.push_back(ctx.isend(dst, slot(0, k - 1, c), sp.wire, sp.len * ws));
    }
  };
  for (size_t k = 1; k <= std::min(steps, kWindow); ++k) sendStep(k);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(rs[(k - 1) * nch + c]);
      Span sp = at(r, c);
      kernels::addWire(sp.f, inAt(k, c), sp.len, w);
    }
    if (k + kWindow <= steps) sendStep(k + kWindow);
  }
  // This rank's block is final: rounded once, kept rounded, sent around.
  for (size_t c = 0; c < nch; ++c) {
    Span sp = at(r, c);
    if (o.op == ReduceOp::kAvg) kernels::divide(sp.f, sp.len, DataType::kFloat32, n);
    kernels::toWire(sp.wire, sp.f, sp.len, w);
    kernels::fromWire(sp.f, sp.wire, sp.len, w);
    sends.push_back(ctx.isend(right, slot(1, 0, c), sp.wire, sp.len * ws));
  }
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(ag[t * nch + c]);
      Span sp = at(mod(r - static_cast<int>(t) - 1, n), c);
      kernels::fromWire(sp.f, sp.wire, sp.len, w);
      if (t + 1 < steps) sends.push_back(ctx.isend(right, slot(1, t + 1, c), sp.wire, sp.len * ws));
    }
  }
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
