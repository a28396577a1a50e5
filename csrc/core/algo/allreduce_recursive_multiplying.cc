// Recursive multiplying: recursive doubling generalised to rounds in groups
// of f = 2, 3, 5 or 7 ranks, for small messages (a candidate up to
// MCCL_SMALL_BYTES: f-1 whole buffers arrive at once) on groups that are not
// a power of two (where its plan is recursive doubling's, all twos, so is
// its cost, and the table prefers recursive doubling). On n = 24 = 2*2*2*3 it takes four rounds (three pairwise,
// one among three ranks) where recursive doubling takes six (it folds 8
// ranks onto 16: four rounds plus the fold in and out), and, unlike
// Bruck's all-gather, every message of a round goes to a rank that sends
// one back, as in recursive doubling.
//
// The model (radixPlan, algo/model.h) picks a base of n/2 to n ranks whose
// size has only such factors, and their order; the other n - base ranks
// fold in and out as in recursive doubling (Fold, common.h). In the round
// with factor f and stride s (the product of the earlier factors), virtual
// rank v belongs to the group {v - d*s + j*s : j < f}, d = (v / s) % f,
// exchanges its partial sum with the other f-1 and adds the f values in
// group order, v_0 + v_1 + ... + v_{f-1}, as every member of the group
// does, so all ranks end with bit-identical results.
//
// MPICH's recursive exchange (MPIR_Allreduce_intra_recexch) generalises
// recursive doubling in the same way with a single radix k.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "algo/common.h"
#include "algo/model.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task allreduceRecursiveMultiplying(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t bytes = o.count * dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;

  const RadixPlan plan = radixPlan(ctx.model(), bytes, n);
  constexpr uint32_t kFold = 0, kUnfold = 63;
  const Fold f(n, r, plan.base);
  if (f.handsOver()) {
    co_await handOver(ctx, buf, bytes, kFold, kUnfold);
    co_return;
  }
  int widest = 2;
  for (int q : plan.factors) widest = std::max(widest, q);
  // Room for the f-1 values of the other group members (and the fold's one).
  Scratch tmp = ctx.scratch(static_cast<size_t>(widest - 1) * bytes + 1);
  co_await foldIn(ctx, f, buf, tmp.data(), o.count, o.dtype, o.op, kFold);

  const auto combine = kernels::combiner(o.dtype, o.op);
  uint32_t round = 1;
  int stride = 1;
  for (int q : plan.factors) {
    const int d = (f.vr / stride) % q, first = f.vr - d * stride;
    // Member j's value (j != d) lands in scratch slot j, or j - 1 above d.
    auto from = [&](int j) { return tmp.data() + static_cast<size_t>(j < d ? j : j - 1) * bytes; };
    std::vector<std::shared_ptr<RecvRequest>> recvs;
    std::vector<std::shared_ptr<SendRequest>> sends;
    for (int j = 0; j < q; ++j) {
      if (j != d) recvs.push_back(ctx.irecv(f.real(first + j * stride), round, from(j), bytes));
    }
    for (int j = 0; j < q; ++j) {
      if (j != d) sends.push_back(ctx.isend(f.real(first + j * stride), round, buf, bytes));
    }
    co_await ctx.waitAll(recvs);
    co_await ctx.waitAll(sends);  // buf is read by the sends until here
    // v_0 + v_1 + ... in group order, this rank's own value at position d.
    uint8_t* acc = d == 0 ? buf : from(0);
    for (int j = 1; j < q; ++j) combine(acc, acc, j == d ? buf : from(j), o.count);
    if (d != 0 && bytes > 0) std::memcpy(buf, acc, bytes);
    stride *= q;
    ++round;
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(buf, o.count, o.dtype, n);
  co_await foldOut(ctx, f, buf, bytes, kUnfold);
}

}  // namespace mccl::algo
