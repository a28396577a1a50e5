// Dissemination barrier: ceil(log2 n) rounds; in round k each rank signals
// rank+2^k and waits for rank-2^k. No rank leaves before all have entered.
#include "algo/common.h"

namespace mccl::algo {

Task barrierDissemination(OpContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  uint32_t round = 0;
  for (int dist = 1; dist < n; dist <<= 1, ++round) {
    auto in = ctx.irecv(mod(r - dist, n), round, nullptr, 0);
    auto out = ctx.isend(mod(r + dist, n), round, nullptr, 0);
    co_await ctx.wait(in);
    co_await ctx.wait(out);
  }
}

}  // namespace mccl::algo
