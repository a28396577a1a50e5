// Direct scatter: the root sends block i to rank i in one round.
#include <cstring>

#include "algo/common.h"

namespace mccl::algo {

void scatterDirect(OpContext& ctx, const ScatterOptions& o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  if (r != o.root) {
    auto in = ctx.irecv(o.root, 0, o.out, bytes);
    ctx.wait(*in);
    return;
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  for (int k = 1; k < n; ++k) {
    int p = mod(r + k, n);
    sends.push_back(ctx.isend(p, 0, o.in[static_cast<size_t>(p)], bytes));
  }
  const void* mine = o.in[static_cast<size_t>(r)];
  if (bytes > 0 && mine != o.out) std::memmove(o.out, mine, bytes);
  ctx.waitAll(sends);
}

}  // namespace mccl::algo
