// Direct all-gather for small messages: one round in which every rank sends
// its block to every other rank. Latency is one message time.
#include <cstring>

#include "algo/common.h"

namespace mccl::algo {

Task allgatherDirect(OpContext& ctx, AllgatherOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  auto* mine = static_cast<uint8_t*>(o.out[static_cast<size_t>(r)]);
  if (o.in != mine && bytes > 0) std::memcpy(mine, o.in, bytes);
  std::vector<std::shared_ptr<RecvRequest>> recvs;
  std::vector<std::shared_ptr<SendRequest>> sends;
  for (int k = 1; k < n; ++k) {
    int src = mod(r - k, n);
    recvs.push_back(ctx.irecv(src, 0, o.out[static_cast<size_t>(src)], bytes));
  }
  for (int k = 1; k < n; ++k) sends.push_back(ctx.isend(mod(r + k, n), 0, mine, bytes));
  co_await ctx.waitAll(recvs);
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
