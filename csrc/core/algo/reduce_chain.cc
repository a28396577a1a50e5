// Pipelined chain reduce for large messages: data flows root+n-1 -> ... ->
// root+1 -> root, chunk by chunk; each rank adds its own chunk to what it
// received and passes the sum on. Every link carries the buffer once.
// Non-root inputs are not modified: sums are formed in scratch slots.
#include <algorithm>

#include "algo/common.h"
#include "algo/model.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task reduceChain(OpContext& ctx, ReduceOptions o) {
  const int n = ctx.size();
  const int vr = mod(ctx.rank() - o.root, n);
  const size_t es = dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  const auto combine = kernels::combiner(o.dtype, o.op);

  // PREMUL_SUM needs scaled inputs: in place at the root, a copy elsewhere.
  Scratch scaled;
  const uint8_t* in = buf;
  if (o.op == ReduceOp::kPreMulSum) {
    if (vr == 0) {
      premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
    } else {
      scaled = ctx.scratch(o.count * es);
      premul(scaled.data(), buf, o.count, o.dtype, o.op, o.premulFactor);
      in = scaled.data();
    }
  }
  if (n == 1) co_return;
  const size_t nch = chainChunks(ctx.model(), OpKind::kReduce, o.count, es, n, ctx.config().chunkBytes);
  const int prev = mod(vr - 1 + o.root, n), next = mod(vr + 1 + o.root, n);

  if (vr == n - 1) {  // the head of the chain sends its input as is
    std::vector<std::shared_ptr<SendRequest>> sends;
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      sends.push_back(ctx.isend(prev, slotId(c), in + ch.begin * es, ch.length * es));
    }
    co_await ctx.waitAll(sends);
    co_return;
  }
  // Slots hold a received chunk, then (off the root) the partial sum being
  // forwarded. Receives are posted k chunks ahead into 2k slots, so a slot is
  // reused k chunks after its forward was queued.
  const size_t k = std::min<size_t>(nch, 8);
  const size_t nslots = 2 * k;
  const size_t slotBytes = (o.count / nch + 1) * es;
  Scratch slots = ctx.scratch(nslots * slotBytes);
  std::vector<std::shared_ptr<RecvRequest>> recvs(nch);
  std::vector<std::shared_ptr<SendRequest>> forwards(nslots);
  // Posts chunk c's receive; its slot's previous forward must have left.
  auto post = [&](size_t c) {
    Chunk ch = chunkOf(o.count, nch, c);
    recvs[c] = ctx.irecv(next, slotId(c), slots.data() + (c % nslots) * slotBytes, ch.length * es);
  };
  for (size_t c = 0; c < k; ++c) post(c);
  for (size_t c = 0; c < nch; ++c) {
    Chunk ch = chunkOf(o.count, nch, c);
    uint8_t* slot = slots.data() + (c % nslots) * slotBytes;
    co_await ctx.wait(recvs[c]);
    if (vr == 0) {
      combine(buf + ch.begin * es, buf + ch.begin * es, slot, ch.length);
      if (o.op == ReduceOp::kAvg) kernels::divide(buf + ch.begin * es, ch.length, o.dtype, n);
    } else {
      combine(slot, slot, in + ch.begin * es, ch.length);
      forwards[c % nslots] = ctx.isend(prev, slotId(c), slot, ch.length * es);
    }
    if (c + k < nch) {
      if (auto& f = forwards[(c + k) % nslots]) co_await ctx.wait(f);
      post(c + k);
    }
  }
  for (auto& f : forwards) {
    if (f) co_await ctx.wait(f);
  }
}

}  // namespace mccl::algo
