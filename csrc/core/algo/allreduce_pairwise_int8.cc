// All-reduce of float32 on the int8 wire (MCCL_WIRE_DTYPE=int8,
// reduce/wire_int8.h): about a quarter of allreduce_ring.cc's bytes on every
// link.
//
// The pairwise exchange of allreduce_pairwise_wire.cc, on whole groups of
// 256 values: the buffer's groups (counted from element 0) are split into n
// blocks, and every rank encodes each of its values exactly once, whichever
// block they fall in: at step k (1..n-1) rank r sends its block r+k to that
// block's owner, and the owner starts from its own values, encoded and
// decoded like everyone else's, and adds the n-1 it receives in float32. A
// rank's contribution is thus exactly mccl.hooks' round trip of its buffer,
// so a hook can keep that round trip's residual for error feedback. Partial
// sums are never encoded, so the error does not grow with n.
//
// All-gather around the ring: the owner encodes its final block once,
// replaces its float32 copy with the decoded values, and the ring forwards
// the bytes unchanged: every rank ends bit-identical.
#include <algorithm>

#include "algo/common.h"
#include "reduce/reduce.h"
#include "reduce/wire_int8.h"

namespace mccl::algo {

Task allreducePairwiseInt8(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.dtype == DataType::kFloat32 && (o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg),
             "int8 wire all-reduce: float32 SUM or AVG only");
  auto* buf = static_cast<float*>(o.buf);
  if (n == 1) co_return;

  using kernels::kInt8Group;
  using kernels::kInt8GroupBytes;
  const size_t groups = (o.count + kInt8Group - 1) / kInt8Group;
  const Partition blocks(groups, n);  // in groups
  const size_t nch = chunksFor(blocks.maxLength(), kInt8GroupBytes, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  auto slot = [&](size_t phase, size_t step, size_t c) {
    return slotId((phase * steps + step) * nch + c);
  };
  // The wire image of the whole buffer: group g at g * kInt8GroupBytes.
  Scratch mirrorMem = ctx.scratch(groups * kInt8GroupBytes);
  uint8_t* mirror = mirrorMem.data();
  struct Span {
    float* f;
    uint8_t* wire;
    size_t len, bytes;
  };
  auto at = [&](int block, size_t c) {
    Chunk ch = chunkOf(blocks.length(block), nch, c);
    const size_t g0 = blocks.offset(block) + ch.begin;
    const size_t e0 = std::min(g0 * kInt8Group, o.count);
    const size_t e1 = std::min((g0 + ch.length) * kInt8Group, o.count);
    return Span{buf + e0, mirror + g0 * kInt8GroupBytes, e1 - e0, kernels::int8WireBytes(e1 - e0)};
  };

  // Reduce-scatter receives: step k's contribution to this rank's block.
  const size_t slotBytes = (blocks.maxLength() / nch + 1) * kInt8GroupBytes;
  Scratch inMem = ctx.scratch(steps * nch * slotBytes);
  auto inAt = [&](size_t k, size_t c) { return inMem.data() + ((k - 1) * nch + c) * slotBytes; };
  std::vector<std::shared_ptr<RecvRequest>> rs(steps * nch);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      rs[(k - 1) * nch + c] = ctx.irecv(mod(r - static_cast<int>(k), n), slot(0, k - 1, c), inAt(k, c),
                                        at(r, c).bytes);
    }
  }
  std::vector<std::shared_ptr<RecvRequest>> ag(steps * nch);
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = at(mod(r - static_cast<int>(t) - 1, n), c);
      ag[t * nch + c] = ctx.irecv(left, slot(1, t, c), sp.wire, sp.bytes);
    }
  }

  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(2 * steps * nch);
  constexpr size_t kWindow = 1;  // as in allreduce_pairwise_wire.cc
  auto sendStep = [&](size_t k) {
    const int dst = mod(r + static_cast<int>(k), n);
    for (size_t c = 0; c < nch; ++c) {
      Span sp = at(dst, c);
      kernels::toInt8Wire(sp.wire, sp.f, sp.len);
      sends.push_back(ctx.isend(dst, slot(0, k - 1, c), sp.wire, sp.bytes));
    }
  };
  for (size_t k = 1; k <= std::min(steps, kWindow); ++k) sendStep(k);
  // This rank's own contribution, encoded like the others.
  for (size_t c = 0; c < nch; ++c) {
    Span sp = at(r, c);
    kernels::toInt8Wire(sp.wire, sp.f, sp.len);
    kernels::fromInt8Wire(sp.f, sp.wire, sp.len);
  }
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(rs[(k - 1) * nch + c]);
      Span sp = at(r, c);
      kernels::addInt8Wire(sp.f, inAt(k, c), sp.len);
    }
    if (k + kWindow <= steps) sendStep(k + kWindow);
  }
  // This rank's block is final: encoded once, kept decoded, sent around.
  for (size_t c = 0; c < nch; ++c) {
    Span sp = at(r, c);
    if (o.op == ReduceOp::kAvg) kernels::divide(sp.f, sp.len, DataType::kFloat32, n);
    kernels::toInt8Wire(sp.wire, sp.f, sp.len);
    kernels::fromInt8Wire(sp.f, sp.wire, sp.len);
    sends.push_back(ctx.isend(right, slot(1, 0, c), sp.wire, sp.bytes));
  }
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(ag[t * nch + c]);
      Span sp = at(mod(r - static_cast<int>(t) - 1, n), c);
      kernels::fromInt8Wire(sp.f, sp.wire, sp.len);
      if (t + 1 < steps) sends.push_back(ctx.isend(right, slot(1, t + 1, c), sp.wire, sp.bytes));
    }
  }
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
