// Direct scatter: the root sends block i to rank i in one round.
#include <cstring>

#include "algo/common.h"

namespace mccl::algo {

Task scatterDirect(OpContext& ctx, ScatterOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  if (r != o.root) {
    auto in = ctx.irecv(o.root, 0, o.out, bytes);
    co_await ctx.wait(in);
    co_return;
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  for (int k = 1; k < n; ++k) {
    int p = mod(r + k, n);
    sends.push_back(ctx.isend(p, 0, o.in[static_cast<size_t>(p)], bytes));
  }
  const void* mine = o.in[static_cast<size_t>(r)];
  if (bytes > 0 && mine != o.out) std::memmove(o.out, mine, bytes);
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
