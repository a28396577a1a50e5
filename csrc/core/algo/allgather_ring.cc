// Ring all-gather for large messages: n-1 steps; at each step a rank
// forwards to its right neighbour the block it received from its left one,
// chunk by chunk. Zero copy: every receive lands in its final place.
#include <cstring>

#include "algo/common.h"

namespace mccl::algo {

Task allgatherRing(OpContext& ctx, AllgatherOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtypeSize(o.dtype);
  const size_t bytes = o.count * es;
  auto block = [&](int b) { return static_cast<uint8_t*>(o.out[static_cast<size_t>(b)]); };
  if (o.in != block(r) && bytes > 0) std::memcpy(block(r), o.in, bytes);
  if (n == 1) co_return;
  const size_t nch = chunksFor(o.count, es, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);

  std::vector<std::shared_ptr<RecvRequest>> recvs(steps * nch);
  for (size_t t = 0; t < steps; ++t) {
    uint8_t* dst = block(mod(r - static_cast<int>(t) - 1, n));
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      recvs[t * nch + c] = ctx.irecv(left, slotId(t * nch + c), dst + ch.begin * es, ch.length * es);
    }
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(steps * nch);
  for (size_t c = 0; c < nch; ++c) {
    Chunk ch = chunkOf(o.count, nch, c);
    sends.push_back(ctx.isend(right, slotId(c), block(r) + ch.begin * es, ch.length * es));
  }
  for (size_t t = 0; t < steps; ++t) {
    uint8_t* src = block(mod(r - static_cast<int>(t) - 1, n));
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(recvs[t * nch + c]);
      if (t + 1 < steps) {
        Chunk ch = chunkOf(o.count, nch, c);
        sends.push_back(ctx.isend(right, slotId((t + 1) * nch + c), src + ch.begin * es, ch.length * es));
      }
    }
  }
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
