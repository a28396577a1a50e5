// Binomial-tree reduce for small messages: the mirror of the binomial
// broadcast. Interior ranks accumulate their children into a scratch copy,
// so no rank's input is modified except the root's (which is its output).
#include <cstring>

#include "algo/common.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task reduceBinomial(OpContext& ctx, ReduceOptions o) {
  const int n = ctx.size();
  const int vr = mod(ctx.rank() - o.root, n);
  const size_t bytes = o.count * dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  const auto combine = kernels::combiner(o.dtype, o.op);

  // The accumulator: the root's buffer, else a scratch copy (made lazily:
  // a leaf without PREMUL_SUM sends its input as is).
  Scratch acc, tmp;
  const uint8_t* mine = buf;
  if (vr == 0) {
    premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  } else if (o.op == ReduceOp::kPreMulSum || ((vr & 1) == 0 && vr + 1 < n)) {
    acc = ctx.scratch(bytes);
    premul(acc.data(), buf, o.count, o.dtype, o.op, o.premulFactor);
    mine = acc.data();
  }
  uint8_t* accum = vr == 0 ? buf : acc.data();
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      auto s = ctx.isend(mod(vr - mask + o.root, n), 0, mine, bytes);
      co_await ctx.wait(s);
      co_return;
    }
    if (vr + mask < n) {
      if (tmp.data() == nullptr) tmp = ctx.scratch(bytes);
      auto in = ctx.irecv(mod(vr + mask + o.root, n), 0, tmp.data(), bytes);
      co_await ctx.wait(in);
      combine(accum, accum, tmp.data(), o.count);
    }
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(buf, o.count, o.dtype, n);
}

}  // namespace mccl::algo
