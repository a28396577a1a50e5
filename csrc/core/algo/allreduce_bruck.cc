// Bruck all-reduce for small messages on large groups: every rank gathers
// all n contributions by Bruck's all-gather in radix k, then folds them
// itself. Round j sends to the k-1 ranks at distances i*k^j below and
// receives from those above, so after ceil(log_k n) rounds each rank holds
// every contribution, for any n (no fold-in rounds for non-powers, as
// recursive doubling needs). k = 2 gives the fewest messages per round,
// k = n is the direct exchange; the cost model picks k for the group and
// size (bruckRadix), the same on every rank.
//
// Rank r's scratch holds block i = rank (r+i) mod n's contribution. Blocks
// are folded in rank order (0, 1, ..., n-1) on every rank, so all ranks
// compute bit-identical results (the same sum as the direct exchange).
// Bruck, Ho, Kipnis, Upfal, Weathersby: "Efficient algorithms for all-to-all
// communications in multiport message-passing systems", IEEE TPDS 8(11), 1997.
#include <algorithm>
#include <cstring>

#include "algo/common.h"
#include "algo/model.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task allreduceBruck(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;

  const int64_t k = bruckRadix(ctx.model(), bytes, n);
  Scratch all = ctx.scratch(static_cast<size_t>(n) * bytes + 1);
  uint8_t* blocks = all.data();
  if (bytes > 0) std::memcpy(blocks, buf, bytes);
  auto at = [&](int64_t block) { return blocks + static_cast<size_t>(block) * bytes; };
  uint32_t slot = 0;
  for (int64_t d = 1; d < n; d *= k) {
    // This round: blocks [0, d) go to rank r - i*d, which places them at
    // i*d; blocks [i*d, i*d + cnt) come from rank r + i*d (its [0, cnt)).
    std::vector<std::shared_ptr<RecvRequest>> recvs;
    std::vector<std::shared_ptr<SendRequest>> sends;
    for (int64_t i = 1; i < k && i * d < n; ++i) {
      const int64_t cnt = std::min<int64_t>(d, n - i * d);
      const int from = mod(static_cast<int>((r + i * d) % n), n);
      recvs.push_back(ctx.irecv(from, slot + static_cast<uint32_t>(i), at(i * d), static_cast<size_t>(cnt) * bytes));
    }
    for (int64_t i = 1; i < k && i * d < n; ++i) {
      const int64_t cnt = std::min<int64_t>(d, n - i * d);
      const int to = mod(static_cast<int>(r - (i * d) % n), n);
      sends.push_back(ctx.isend(to, slot + static_cast<uint32_t>(i), blocks, static_cast<size_t>(cnt) * bytes));
    }
    co_await ctx.waitAll(recvs);
    co_await ctx.waitAll(sends);  // blocks [0, d) are read by the sends until here
    slot += static_cast<uint32_t>(k);
  }

  // Fold in rank order: rank p's contribution is block (p - r) mod n.
  const auto combine = kernels::combiner(o.dtype, o.op);
  if (bytes > 0) std::memcpy(buf, at(mod(-r, n)), bytes);
  for (int p = 1; p < n; ++p) combine(buf, buf, at(mod(p - r, n)), o.count);
  if (o.op == ReduceOp::kAvg) kernels::divide(buf, o.count, o.dtype, n);
}

}  // namespace mccl::algo
