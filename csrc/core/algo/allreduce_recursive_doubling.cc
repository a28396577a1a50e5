// Recursive-doubling all-reduce for small messages: log2(p) rounds in which
// partners exchange whole buffers and both combine. On n ranks that are not
// a power of two (or where the cost model prefers fewer rounds), the ranks
// first fold into p leaders (Blocks, common.h; p from rdLeaders, model.h):
// each block's other ranks hand their buffers to its last rank, which adds
// them in rank order, runs the rounds with the other leaders and sends each
// of them the result. The largest p is the classic fold (blocks of two);
// a smaller one has fewer rounds, and more messages into and out of each
// leader.
//
// Partners combine the same two operands in swapped order; every supported
// reduce op is commutative, so all leaders end with bit-identical results,
// and the other ranks receive a leader's.
#include <vector>

#include "algo/common.h"
#include "algo/model.h"
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
  const Blocks blocks(n, rdLeaders(ctx.model(), bytes, n));
  const int v = blocks.blockOf(r), lead = blocks.leader(v), first = blocks.start(v);
  if (r != lead) {
    auto s = ctx.isend(lead, kFold, buf, bytes);
    co_await ctx.wait(s);
    auto back = ctx.irecv(lead, kUnfold, buf, bytes);
    co_await ctx.wait(back);
    co_return;
  }
  const auto combine = kernels::combiner(o.dtype, o.op);
  const int members = lead - first;  // the block's other ranks
  Scratch tmp = ctx.scratch(bytes * static_cast<size_t>(members > 1 ? members : 1));
  if (members > 0) {
    // Received in any order, added in rank order (the bits do not depend on
    // which arrives first).
    std::vector<std::shared_ptr<RecvRequest>> in;
    in.reserve(static_cast<size_t>(members));
    for (int m = 0; m < members; ++m) in.push_back(ctx.irecv(first + m, kFold, tmp.data() + m * bytes, bytes));
    for (auto& req : in) co_await ctx.wait(req);
    for (int m = 0; m < members; ++m) combine(buf, buf, tmp.data() + m * bytes, o.count);
  }
  uint32_t round = 1;
  for (int mask = 1; mask < blocks.p; mask <<= 1, ++round) {
    const int partner = blocks.leader(v ^ mask);
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
  if (members > 0) {
    std::vector<std::shared_ptr<SendRequest>> out;
    out.reserve(static_cast<size_t>(members));
    for (int m = 0; m < members; ++m) out.push_back(ctx.isend(first + m, kUnfold, buf, bytes));
    for (auto& req : out) co_await ctx.wait(req);
  }
}

}  // namespace mccl::algo
