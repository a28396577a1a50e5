// Direct all-reduce for tiny messages on small groups: every rank sends its
// buffer to every other rank, then folds all n contributions itself. One
// message time of latency (recursive doubling needs log2 n, plus two for a
// non-power-of-two group), at n-1 messages per rank.
//
// Contributions are folded in rank order (0, 1, ..., n-1) on every rank, so
// all ranks compute bit-identical results.
#include <cstring>

#include "algo/common.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task allreduceDirect(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;

  const auto combine = kernels::combiner(o.dtype, o.op);
  // Slot p holds rank p's contribution; this rank's own stays in buf.
  Scratch all = ctx.scratch(static_cast<size_t>(n) * bytes + 1);
  auto from = [&](int p) { return p == r ? buf : all.data() + static_cast<size_t>(p) * bytes; };
  std::vector<std::shared_ptr<RecvRequest>> recvs;
  std::vector<std::shared_ptr<SendRequest>> sends;
  for (int k = 1; k < n; ++k) {
    int p = mod(r - k, n);
    recvs.push_back(ctx.irecv(p, 0, from(p), bytes));
  }
  for (int k = 1; k < n; ++k) sends.push_back(ctx.isend(mod(r + k, n), 0, buf, bytes));
  co_await ctx.waitAll(recvs);
  co_await ctx.waitAll(sends);  // buf is read by the sends until here

  // Fold in rank order into slot 0 (or straight into buf when r == 0).
  uint8_t* acc = r == 0 ? buf : all.data();
  for (int p = 1; p < n; ++p) combine(acc, acc, from(p), o.count);
  if (o.op == ReduceOp::kAvg) kernels::divide(acc, o.count, o.dtype, n);
  if (acc != buf && bytes > 0) std::memcpy(buf, acc, bytes);
}

}  // namespace mccl::algo
