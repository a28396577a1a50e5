// Ring all-reduce: a reduce-scatter followed by an all-gather around the
// ring, each block cut into chunks that flow as a pipeline. Bandwidth
// optimal: each rank sends and receives 2(n-1)/n of the buffer.
//
// Zero copy: sends read the user's buffer, all-gather receives land in it;
// only reduce-scatter receives go through K scratch slots. Receives for the
// all-gather are posted up front: by the time a final block arrives, this
// rank's own sends of that block are long out of its memory (the owner could
// not have finished the block without them).
#include <algorithm>

#include "algo/common.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task allreduceRing(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;  // AVG over one rank is the identity

  const auto combine = kernels::combiner(o.dtype, o.op);
  const Partition blocks(o.count, n);
  const size_t nch = chunksFor(blocks.maxLength(), es, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  auto slot = [&](size_t phase, size_t step, size_t c) {
    return slotId((phase * steps + step) * nch + c);
  };
  auto at = [&](int block, size_t c, size_t* len) {
    Chunk ch = chunkOf(blocks.length(block), nch, c);
    *len = ch.length;
    return buf + (blocks.offset(block) + ch.begin) * es;
  };

  // Reduce-scatter receives go to K scratch slots, recycled in order.
  const size_t items = steps * nch;
  const size_t k = std::min<size_t>(items, 8);
  const size_t slotBytes = (blocks.maxLength() / nch + 1) * es;
  Scratch scratch = ctx.scratch(k * slotBytes);
  std::vector<std::shared_ptr<RecvRequest>> rs(items);
  auto postRs = [&](size_t i) {
    size_t s = i / nch, c = i % nch, len = 0;
    at(mod(r - static_cast<int>(s) - 1, n), c, &len);
    rs[i] = ctx.irecv(left, slot(0, s, c), scratch.data() + (i % k) * slotBytes, len * es);
  };
  for (size_t i = 0; i < k; ++i) postRs(i);

  std::vector<std::shared_ptr<RecvRequest>> ag(items);
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      size_t len = 0;
      uint8_t* p = at(mod(r - static_cast<int>(t), n), c, &len);
      ag[t * nch + c] = ctx.irecv(left, slot(1, t, c), p, len * es);
    }
  }

  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(2 * items);
  for (size_t c = 0; c < nch; ++c) {
    size_t len = 0;
    uint8_t* p = at(r, c, &len);
    sends.push_back(ctx.isend(right, slot(0, 0, c), p, len * es));
  }
  for (size_t i = 0; i < items; ++i) {
    const size_t s = i / nch, c = i % nch;
    const int block = mod(r - static_cast<int>(s) - 1, n);
    size_t len = 0;
    uint8_t* p = at(block, c, &len);
    co_await ctx.wait(rs[i]);
    combine(p, p, scratch.data() + (i % k) * slotBytes, len);
    if (i + k < items) postRs(i + k);
    if (s + 1 < steps) {
      sends.push_back(ctx.isend(right, slot(0, s + 1, c), p, len * es));
    } else {
      // This chunk of this rank's block is final: it starts the all-gather.
      if (o.op == ReduceOp::kAvg) kernels::divide(p, len, o.dtype, n);
      sends.push_back(ctx.isend(right, slot(1, 0, c), p, len * es));
    }
  }
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(ag[t * nch + c]);
      if (t + 1 < steps) {
        size_t len = 0;
        uint8_t* p = at(mod(r - static_cast<int>(t), n), c, &len);
        sends.push_back(ctx.isend(right, slot(1, t + 1, c), p, len * es));
      }
    }
  }
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
