// Ring all-reduce of float32 (or float64) whose partial sums travel in a 16-bit wire
// dtype (MCCL_WIRE_DTYPE=bf16|fp16): half the bytes of allreduce_ring.cc on
// every link, accumulation in float32 at every hop.
//
// Reduce-scatter: each rank converts the partial sum of a chunk to the wire
// dtype, sends it; the receiver adds it (as float32) into its own float32
// chunk. The owner of a final chunk rounds it to the wire dtype once and
// replaces its own float32 copy with that rounding, then the all-gather
// forwards those wire bytes unchanged: every rank ends with bit-identical
// results (DDP replicas never drift).
//
// A wire-format mirror of the buffer holds what is sent; all-gather data
// lands in it and is converted into the user's buffer. A region of the mirror
// that this rank sent during the reduce-scatter is overwritten only by the
// final block coming back, which cannot come back before the send reached the
// right neighbour (the final sum needs it).
#include <algorithm>

#include "algo/common.h"
#include "reduce/reduce.h"
#include "reduce/wire.h"

namespace mccl::algo {

namespace {

// T: float for float32, double for float64 (accumulated in float64).
template <class T>
Task ringWire(OpContext& ctx, AllreduceOptions o, kernels::WireDtype w) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg, "wire dtype ring: SUM or AVG only");
  auto* buf = static_cast<T*>(o.buf);
  if (n == 1) co_return;

  constexpr size_t ws = sizeof(uint16_t);
  const Partition blocks(o.count, n);
  const size_t nch = chunksFor(blocks.maxLength(), ws, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  auto slot = [&](size_t phase, size_t step, size_t c) {
    return slotId((phase * steps + step) * nch + c);
  };
  Scratch mirrorMem = ctx.scratch(o.count * ws);
  auto* mirror = reinterpret_cast<uint16_t*>(mirrorMem.data());
  // Chunk c of `block`: its float32 elements, its wire mirror, its length.
  struct Span {
    T* f;
    uint16_t* wire;
    size_t len;
  };
  auto at = [&](int block, size_t c) {
    Chunk ch = chunkOf(blocks.length(block), nch, c);
    const size_t off = blocks.offset(block) + ch.begin;
    return Span{buf + off, mirror + off, ch.length};
  };

  const size_t items = steps * nch;
  const size_t k = std::min<size_t>(items, 8);
  const size_t slotElems = blocks.maxLength() / nch + 1;
  Scratch scratchMem = ctx.scratch(k * slotElems * ws);
  auto* scratch = reinterpret_cast<uint16_t*>(scratchMem.data());
  std::vector<std::shared_ptr<RecvRequest>> rs(items);
  auto postRs = [&](size_t i) {
    size_t s = i / nch, c = i % nch;
    Span sp = at(mod(r - static_cast<int>(s) - 1, n), c);
    rs[i] = ctx.irecv(left, slot(0, s, c), scratch + (i % k) * slotElems, sp.len * ws);
  };
  for (size_t i = 0; i < k; ++i) postRs(i);

  std::vector<std::shared_ptr<RecvRequest>> ag(items);
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = at(mod(r - static_cast<int>(t), n), c);
      ag[t * nch + c] = ctx.irecv(left, slot(1, t, c), sp.wire, sp.len * ws);
    }
  }

  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(2 * items + nch);
  for (size_t c = 0; c < nch; ++c) {
    Span sp = at(r, c);
    kernels::toWire(sp.wire, sp.f, sp.len, w);
    sends.push_back(ctx.isend(right, slot(0, 0, c), sp.wire, sp.len * ws));
  }
  for (size_t i = 0; i < items; ++i) {
    const size_t s = i / nch, c = i % nch;
    Span sp = at(mod(r - static_cast<int>(s) - 1, n), c);
    co_await ctx.wait(rs[i]);
    kernels::addWire(sp.f, scratch + (i % k) * slotElems, sp.len, w);
    if (i + k < items) postRs(i + k);
    if (s + 1 < steps) {
      kernels::toWire(sp.wire, sp.f, sp.len, w);
      sends.push_back(ctx.isend(right, slot(0, s + 1, c), sp.wire, sp.len * ws));
    } else {
      // Final: rounded once; this rank keeps the rounding too.
      if (o.op == ReduceOp::kAvg) kernels::divide(sp.f, sp.len, o.dtype, n);
      kernels::toWire(sp.wire, sp.f, sp.len, w);
      kernels::fromWire(sp.f, sp.wire, sp.len, w);
      sends.push_back(ctx.isend(right, slot(1, 0, c), sp.wire, sp.len * ws));
    }
  }
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(ag[t * nch + c]);
      Span sp = at(mod(r - static_cast<int>(t), n), c);
      kernels::fromWire(sp.f, sp.wire, sp.len, w);
      if (t + 1 < steps) sends.push_back(ctx.isend(right, slot(1, t + 1, c), sp.wire, sp.len * ws));
    }
  }
  co_await ctx.waitAll(sends);
}

}  // namespace

Task allreduceRingWire(OpContext& ctx, AllreduceOptions o) {
  MCCL_CHECK(o.dtype == DataType::kFloat32 || o.dtype == DataType::kFloat64,
             "wire dtype ring: float32 or float64 only");
  const kernels::WireDtype w = wireDtypeOf(ctx.config());
  if (o.dtype == DataType::kFloat64) return ringWire<double>(ctx, o, w);
  return ringWire<float>(ctx, o, w);
}

}  // namespace mccl::algo
