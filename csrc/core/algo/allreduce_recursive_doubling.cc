// Recursive-doubling all-reduce for small messages: log2(n) rounds in which
// partners exchange whole buffers and both combine. A non-power-of-two group
// first folds (Fold, common.h): among the first 2*rem ranks, each even rank
// hands its data to the odd rank above it and waits for the result at the end.
//
// Partners combine the same two operands in swapped order; every supported
// reduce op is commutative, so all ranks end with bit-identical results.
#include "algo/common.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"
#include "util/trace.h"

namespace mccl::algo {

Task allreduceRecursiveDoubling(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;

  constexpr uint32_t kFold = 0, kUnfold = 63;
  const Fold f(n, r);
  if (f.handsOver()) {
    co_await handOver(ctx, buf, bytes, kFold, kUnfold);
    co_return;
  }
  const auto combine = kernels::combiner(o.dtype, o.op);
  Scratch tmp = ctx.scratch(bytes);
  co_await foldIn(ctx, f, buf, tmp.data(), o.count, o.dtype, o.op, kFold);
  uint32_t round = 1;
  for (int mask = 1; mask < f.p; mask <<= 1, ++round) {
    const int partner = f.real(f.vr ^ mask);
    trace::record(trace::Ev::kRoundPosted, partner, ctx.groupId(), ctx.seq(), round);
    auto in = ctx.irecv(partner, round, tmp.data(), bytes);
    auto out = ctx.isend(partner, round, buf, bytes);
    trace::record(trace::Ev::kRoundSent, partner, ctx.groupId(), ctx.seq(), round);
    co_await ctx.wait(in);
    trace::record(trace::Ev::kRoundResumed, partner, ctx.groupId(), ctx.seq(), round);
    co_await ctx.wait(out);  // buf is read by the send until here
    combine(buf, buf, tmp.data(), o.count);
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(buf, o.count, o.dtype, n);
  co_await foldOut(ctx, f, buf, bytes, kUnfold);
}

}  // namespace mccl::algo
