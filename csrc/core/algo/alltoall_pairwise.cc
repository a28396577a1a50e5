// Pairwise all-to-all(v): at step k a rank sends to rank+k and receives from
// rank-k, so each link carries one message per step. All receives are posted
// first, directly into the outputs; per-pair sizes may differ. Small
// exchanges put every send on the wire at once; large ones go one step at a
// time, so a rank's links are not all contending for its cores and its
// peers' receive buffers at once.
#include <algorithm>
#include <cstring>

#include "algo/common.h"

namespace mccl::algo {

Task alltoallPairwise(OpContext& ctx, AlltoallOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtypeSize(o.dtype);
  std::vector<std::shared_ptr<RecvRequest>> recvs;
  std::vector<std::shared_ptr<SendRequest>> sends;
  size_t largest = 0;
  for (int p = 0; p < n; ++p) largest = std::max(largest, o.inCounts[static_cast<size_t>(p)] * es);
  const bool stepwise = largest >= ctx.config().chunkBytes;
  for (int k = 1; k < n; ++k) {
    size_t src = static_cast<size_t>(mod(r - k, n));
    recvs.push_back(ctx.irecv(static_cast<int>(src), 0, o.out[src], o.outCounts[src] * es));
  }
  const size_t self = static_cast<size_t>(r);
  if (o.inCounts[self] > 0 && o.out[self] != o.in[self]) {
    std::memmove(o.out[self], o.in[self], o.inCounts[self] * es);
  }
  for (int k = 1; k < n; ++k) {
    size_t dst = static_cast<size_t>(mod(r + k, n));
    sends.push_back(ctx.isend(static_cast<int>(dst), 0, o.in[dst], o.inCounts[dst] * es));
    if (stepwise) {
      co_await ctx.wait(sends.back());
      co_await ctx.wait(recvs[static_cast<size_t>(k - 1)]);
    }
  }
  co_await ctx.waitAll(recvs);
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
