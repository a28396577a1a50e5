// Recursive-doubling all-reduce for small messages: log2(n) rounds in which
// partners exchange whole buffers and both combine. A non-power-of-two group
// first folds: among the first 2*rem ranks, each even rank hands its data to
// the odd rank above it and waits for the result at the end.
//
// Partners combine the same two operands in swapped order; every supported
// reduce op is commutative, so all ranks end with bit-identical results.
#include "algo/common.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task allreduceRecursiveDoubling(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;

  const auto combine = kernels::combiner(o.dtype, o.op);
  Scratch tmp = ctx.scratch(bytes);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  constexpr uint32_t kFold = 0, kUnfold = 63;

  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      auto s = ctx.isend(r + 1, kFold, buf, bytes);
      co_await ctx.wait(s);
      auto back = ctx.irecv(r + 1, kUnfold, buf, bytes);
      co_await ctx.wait(back);
      co_return;
    }
    auto in = ctx.irecv(r - 1, kFold, tmp.data(), bytes);
    co_await ctx.wait(in);
    combine(buf, buf, tmp.data(), o.count);
    vr = r / 2;
  } else {
    vr = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  uint32_t round = 1;
  for (int mask = 1; mask < p; mask <<= 1, ++round) {
    const int partner = real(vr ^ mask);
    auto in = ctx.irecv(partner, round, tmp.data(), bytes);
    auto out = ctx.isend(partner, round, buf, bytes);
    co_await ctx.wait(in);
    co_await ctx.wait(out);  // buf is read by the send until here
    combine(buf, buf, tmp.data(), o.count);
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(buf, o.count, o.dtype, n);
  if (r < 2 * rem) {
    auto s = ctx.isend(r - 1, kUnfold, buf, bytes);
    co_await ctx.wait(s);
  }
}

}  // namespace mccl::algo
