// Ring reduce-scatter for large messages: n-1 steps; at step s a rank adds
// its own contribution to the partial sum it received and passes it on; the
// last addition lands in the output. Each rank sends and receives (n-1)/n of
// the input, the bandwidth optimum.
//
// Items (step s, chunk c) run in wavefront order: wavefront t holds
// (0, t), (1, t-1), ... Each link then carries items in the order its
// receiver consumes them, so no send queue builds a backlog. (Step-major
// order sent a rank's whole first block up front: every forward then queued
// behind it, scratch slots waited for those forwards, and from 256 MiB on 4
// ranks the arrivals overran the unexpected-message budget: 70 % of goodput
// on the network lab.) Inputs are never modified: step-0 partial sums land
// in the output buffer, later ones in a ring of scratch slots, each reused
// once the forward of its last item has left.
#include <algorithm>
#include <cstring>

#include "algo/common.h"
#include "reduce/parallel.h"
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
  const auto combine = kernels::combiner(o.dtype, o.op);
  const size_t nch = chunksFor(o.count, es, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);

  struct Item {
    size_t s, c, slot;  // slot: index among the items that need a scratch slot
  };
  std::vector<Item> order;
  order.reserve(steps * nch);
  size_t later = 0;
  for (size_t t = 0; t + 1 < nch + steps; ++t) {
    for (size_t s = 0; s < steps && s <= t; ++s) {
      if (t - s < nch) order.push_back({s, t - s, s > 0 ? later++ : 0});
    }
  }
  // Receives are posted `ahead` items (a wavefront and this rank's two queued
  // own chunks) beyond the one being waited for. A slot's previous item lies
  // at least `nslots` items back, so it has been consumed when the slot is
  // reposted; its forward then had about a wavefront to leave.
  const size_t ahead = steps + 2;
  const size_t nslots = std::min(later, ahead + steps);
  const size_t slotBytes = (o.count / nch + 1) * es;
  Scratch slots = ctx.scratch(nslots * slotBytes);
  auto bufOf = [&](const Item& it) -> uint8_t* {
    if (it.s == 0) return out + chunkOf(o.count, nch, it.c).begin * es;
    return slots.data() + (it.slot % nslots) * slotBytes;
  };
  const size_t items = order.size();
  std::vector<std::shared_ptr<RecvRequest>> recvs(items);
  std::vector<std::shared_ptr<SendRequest>> slotForwards(nslots), zeroForwards(nch), first(nch);
  auto sendFirst = [&](size_t c) {  // this rank's step-0 contribution to chunk c
    if (c >= nch) return;
    Chunk ch = chunkOf(o.count, nch, c);
    const uint8_t* block = in[static_cast<size_t>(mod(r - 1, n))];
    first[c] = ctx.isend(right, slotId(c), block + ch.begin * es, ch.length * es);
  };
  size_t posted = 0;
  auto postUpTo = [&](size_t limit) -> Task {
    for (; posted < std::min(limit, items); ++posted) {
      const Item& it = order[posted];
      if (it.s > 0) {
        if (auto& f = slotForwards[it.slot % nslots]) co_await ctx.wait(f);
      }
      Chunk ch = chunkOf(o.count, nch, it.c);
      recvs[posted] = ctx.irecv(left, slotId(it.s * nch + it.c), bufOf(it), ch.length * es);
    }
  };
  co_await postUpTo(ahead + 1);
  sendFirst(0);
  sendFirst(1);
  for (size_t i = 0; i < items; ++i) {
    const Item& it = order[i];
    const int b = mod(r - static_cast<int>(it.s) - 2, n);
    Chunk ch = chunkOf(o.count, nch, it.c);
    const uint8_t* mine = in[static_cast<size_t>(b)] + ch.begin * es;
    co_await ctx.wait(recvs[i]);
    if (it.s == 0) sendFirst(it.c + 2);  // keep two of this rank's own chunks queued
    if (it.s + 1 < steps) {
      combine(bufOf(it), bufOf(it), mine, ch.length);
      auto f = ctx.isend(right, slotId((it.s + 1) * nch + it.c), bufOf(it), ch.length * es);
      (it.s == 0 ? zeroForwards[it.c] : slotForwards[it.slot % nslots]) = std::move(f);
    } else {
      uint8_t* dst = out + ch.begin * es;
      // The output chunk held step 0's partial sum: its forward must be out.
      if (it.s > 0 && zeroForwards[it.c]) co_await ctx.wait(zeroForwards[it.c]);
      combine(dst, bufOf(it), mine, ch.length);
      if (o.op == ReduceOp::kAvg) kernels::divide(dst, ch.length, o.dtype, n);
    }
    co_await postUpTo(i + 2 + ahead);
  }
  for (auto* list : {&first, &zeroForwards, &slotForwards}) {
    for (auto& f : *list) {
      if (f) co_await ctx.wait(f);
    }
  }
}

}  // namespace mccl::algo
