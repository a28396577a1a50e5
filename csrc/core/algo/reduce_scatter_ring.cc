// Ring reduce-scatter for large messages: n-1 steps; at step s a rank adds
// its own contribution to the partial sum it received and passes it on; the
// last addition lands in the output. Each rank sends and receives (n-1)/n of
// the input, the bandwidth optimum.
//
// Inputs are never modified: step 0's partial sums land in the output buffer
// (all posted up front, so the opening burst never waits in the unexpected
// budget), later ones in scratch slots posted k items ahead into 2k slots, so
// a slot is reused k items after its forward was queued.
#include <algorithm>
#include <cstring>

#include "algo/common.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task reduceScatterRing(OpContext& ctx, ReduceScatterOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtypeSize(o.dtype);
  const size_t bytes = o.count * es;

  // PREMUL_SUM scales the inputs first, into a scratch copy.
  Scratch scaled;
  std::vector<const uint8_t*> in(static_cast<size_t>(n));
  if (o.op == ReduceOp::kPreMulSum) {
    scaled = ctx.scratch(static_cast<size_t>(n) * bytes);
    for (int b = 0; b < n; ++b) {
      uint8_t* dst = scaled.data() + static_cast<size_t>(b) * bytes;
      premul(dst, o.in[static_cast<size_t>(b)], o.count, o.dtype, o.op, o.premulFactor);
      in[static_cast<size_t>(b)] = dst;
    }
  } else {
    for (int b = 0; b < n; ++b) in[static_cast<size_t>(b)] = static_cast<const uint8_t*>(o.in[static_cast<size_t>(b)]);
  }
  auto* out = static_cast<uint8_t*>(o.out);
  if (n == 1) {
    if (bytes > 0 && out != in[0]) std::memmove(out, in[0], bytes);
    co_return;
  }
  const auto combine = kernels::combineFn(o.dtype, o.op);
  const size_t nch = chunksFor(o.count, es, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  const size_t items = steps * nch;
  // Step 0 arrives as one burst (every rank sends its first block at once):
  // all its receives are posted up front, straight into the output buffer,
  // which is free until the last step; no step-0 chunk waits in the
  // unexpected-message budget. Later steps use a ring of 2k scratch slots,
  // posted k items ahead.
  const size_t later = items - nch;
  const size_t k = std::min<size_t>(later, 8);
  const size_t nslots = std::max<size_t>(2 * k, 1);
  const size_t slotBytes = (o.count / nch + 1) * es;
  Scratch slots = ctx.scratch(later > 0 ? nslots * slotBytes : 0);
  // Item i = (step s, chunk c) receives block r-s-2's partial sum from the left.
  auto bufOf = [&](size_t i) -> uint8_t* {
    if (i < nch) return out + chunkOf(o.count, nch, i).begin * es;
    return slots.data() + ((i - nch) % nslots) * slotBytes;
  };
  std::vector<std::shared_ptr<RecvRequest>> recvs(items);
  std::vector<std::shared_ptr<SendRequest>> forwards(nslots), zeroForwards(nch);
  auto post = [&](size_t i) {
    Chunk ch = chunkOf(o.count, nch, i % nch);
    recvs[i] = ctx.irecv(left, slotId(i), bufOf(i), ch.length * es);
  };
  for (size_t i = 0; i < nch + k; ++i) post(i);

  std::vector<std::shared_ptr<SendRequest>> first;
  const uint8_t* firstBlock = in[static_cast<size_t>(mod(r - 1, n))];
  for (size_t c = 0; c < nch; ++c) {
    Chunk ch = chunkOf(o.count, nch, c);
    first.push_back(ctx.isend(right, slotId(c), firstBlock + ch.begin * es, ch.length * es));
  }
  for (size_t i = 0; i < items; ++i) {
    const size_t s = i / nch, c = i % nch;
    const int b = mod(r - static_cast<int>(s) - 2, n);
    Chunk ch = chunkOf(o.count, nch, c);
    const uint8_t* mine = in[static_cast<size_t>(b)] + ch.begin * es;
    co_await ctx.wait(recvs[i]);
    if (s + 1 < steps) {
      combine(bufOf(i), bufOf(i), mine, ch.length);
      auto f = ctx.isend(right, slotId(i + nch), bufOf(i), ch.length * es);
      (s == 0 ? zeroForwards[c] : forwards[(i - nch) % nslots]) = std::move(f);
    } else {
      uint8_t* dst = out + ch.begin * es;
      // The output chunk held step 0's partial sum: its forward must be out.
      if (s > 0 && zeroForwards[c]) co_await ctx.wait(zeroForwards[c]);
      combine(dst, bufOf(i), mine, ch.length);
      if (o.op == ReduceOp::kAvg) kernels::divide(dst, ch.length, o.dtype, n);
    }
    // Keep k slot items posted ahead; a slot is reused once its forward left.
    const size_t next = i + k;
    if (i >= nch && next < items) {
      if (auto& f = forwards[(next - nch) % nslots]) co_await ctx.wait(f);
      post(next);
    }
  }
  co_await ctx.waitAll(first);
  for (auto& f : zeroForwards) {
    if (f) co_await ctx.wait(f);
  }
  for (auto& f : forwards) {
    if (f) co_await ctx.wait(f);
  }
}

}  // namespace mccl::algo
