// Pipelined chain broadcast for large messages: root -> root+1 -> ... ,
// chunk by chunk, each rank forwarding a chunk as soon as it lands. Every
// link carries the buffer once, so the time approaches size / bandwidth.
// Zero copy: receives land in the output, forwards read from it.
#include "algo/common.h"
#include "algo/model.h"

namespace mccl::algo {

Task broadcastChain(OpContext& ctx, BroadcastOptions o) {
  const int n = ctx.size();
  if (n == 1) co_return;
  const int vr = mod(ctx.rank() - o.root, n);
  const size_t es = dtypeSize(o.dtype);
  const size_t nch = chainChunks(ctx.model(), OpKind::kBroadcast, o.count, es, n, ctx.config().chunkBytes);
  auto* buf = static_cast<uint8_t*>(o.buf);
  const int prev = mod(vr - 1 + o.root, n), next = mod(vr + 1 + o.root, n);

  std::vector<std::shared_ptr<RecvRequest>> recvs;
  if (vr > 0) {
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      recvs.push_back(ctx.irecv(prev, slotId(c), buf + ch.begin * es, ch.length * es));
    }
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  for (size_t c = 0; c < nch; ++c) {
    if (vr > 0) co_await ctx.wait(recvs[c]);
    if (vr + 1 < n) {
      Chunk ch = chunkOf(o.count, nch, c);
      sends.push_back(ctx.isend(next, slotId(c), buf + ch.begin * es, ch.length * es));
    }
  }
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
