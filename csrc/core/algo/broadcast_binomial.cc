// Binomial-tree broadcast for small messages: ceil(log2 n) rounds; the set
// of ranks holding the data doubles each round.
#include "algo/common.h"

namespace mccl::algo {

Task broadcastBinomial(OpContext& ctx, BroadcastOptions o) {
  const int n = ctx.size();
  if (n == 1) co_return;
  const int vr = mod(ctx.rank() - o.root, n);
  const size_t bytes = o.count * dtypeSize(o.dtype);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      auto in = ctx.irecv(mod(vr - mask + o.root, n), 0, o.buf, bytes);
      co_await ctx.wait(in);
      break;
    }
    mask <<= 1;
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) sends.push_back(ctx.isend(mod(vr + mask + o.root, n), 0, o.buf, bytes));
  }
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
