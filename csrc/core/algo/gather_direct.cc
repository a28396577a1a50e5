// Direct gather: every rank sends its block to the root in one round.
#include <cstring>

#include "algo/common.h"

namespace mccl::algo {

Task gatherDirect(OpContext& ctx, GatherOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  if (r != o.root) {
    auto s = ctx.isend(o.root, 0, o.in, bytes);
    co_await ctx.wait(s);
    co_return;
  }
  std::vector<std::shared_ptr<RecvRequest>> recvs;
  for (int p = 0; p < n; ++p) {
    if (p != r) recvs.push_back(ctx.irecv(p, 0, o.out[static_cast<size_t>(p)], bytes));
  }
  void* mine = o.out[static_cast<size_t>(r)];
  if (bytes > 0 && mine != o.in) std::memmove(mine, o.in, bytes);
  co_await ctx.waitAll(recvs);
}

}  // namespace mccl::algo
