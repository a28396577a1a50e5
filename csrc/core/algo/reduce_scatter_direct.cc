// Direct reduce-scatter for small messages: every rank sends block i to rank
// i in one round, then adds up what it received.
#include <cstring>

#include "algo/common.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task reduceScatterDirect(OpContext& ctx, ReduceScatterOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtypeSize(o.dtype);
  const size_t bytes = o.count * es;
  const auto combine = kernels::combiner(o.dtype, o.op);
  Scratch scaled, tmp = ctx.scratch(static_cast<size_t>(n) * bytes);
  std::vector<const void*> in = o.in;
  if (o.op == ReduceOp::kPreMulSum) {
    scaled = ctx.scratch(static_cast<size_t>(n) * bytes);
    for (int b = 0; b < n; ++b) {
      uint8_t* dst = scaled.data() + static_cast<size_t>(b) * bytes;
      premul(dst, o.in[static_cast<size_t>(b)], o.count, o.dtype, o.op, o.premulFactor);
      in[static_cast<size_t>(b)] = dst;
    }
  }
  std::vector<std::shared_ptr<RecvRequest>> recvs(static_cast<size_t>(n));
  std::vector<std::shared_ptr<SendRequest>> sends;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    recvs[static_cast<size_t>(p)] = ctx.irecv(p, 0, tmp.data() + static_cast<size_t>(p) * bytes, bytes);
  }
  for (int k = 1; k < n; ++k) {
    int p = mod(r + k, n);
    sends.push_back(ctx.isend(p, 0, in[static_cast<size_t>(p)], bytes));
  }
  auto* out = static_cast<uint8_t*>(o.out);
  if (bytes > 0 && out != in[static_cast<size_t>(r)]) std::memmove(out, in[static_cast<size_t>(r)], bytes);
  // Combine in rank order so the result does not depend on arrival order.
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    co_await ctx.wait(recvs[static_cast<size_t>(p)]);
    combine(out, out, tmp.data() + static_cast<size_t>(p) * bytes, o.count);
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(out, o.count, o.dtype, n);
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
