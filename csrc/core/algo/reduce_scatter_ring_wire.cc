// Ring reduce-scatter of float32 whose partial sums travel in a 16-bit wire
// dtype (MCCL_WIRE_DTYPE=bf16|fp16): half the bytes of reduce_scatter_ring.cc.
// At step s a rank adds the partial sum it received (as float32) to its own
// contribution, rounds the result to the wire dtype and passes it on; the
// last addition, in float32, is the output (rounded by no wire).
//
// Every receive is posted up front into a wire-format area of its own and
// every send reads one of its own, so nothing is recycled while in flight:
// the cost is (n-1)/n of the input in 16-bit scratch, twice.
#include <algorithm>

#include "algo/common.h"
#include "reduce/reduce.h"
#include "reduce/wire.h"

namespace mccl::algo {

namespace {

// T: float for float32, double for float64 (accumulated in float64).
template <class T>
Task ringWire(OpContext& ctx, ReduceScatterOptions o, kernels::WireDtype w) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg, "wire dtype ring: SUM or AVG only");
  auto* out = static_cast<T*>(o.out);
  auto in = [&](int block) { return static_cast<const T*>(o.in[static_cast<size_t>(block)]); };
  if (n == 1) {
    if (o.count > 0 && out != in(0)) std::copy(in(0), in(0) + o.count, out);
    co_return;
  }
  constexpr size_t ws = sizeof(uint16_t);
  const size_t nch = chunksFor(o.count, ws, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  // Step s's wire area: [s * count, (s + 1) * count).
  Scratch recvMem = ctx.scratch(steps * o.count * ws), sendMem = ctx.scratch(steps * o.count * ws);
  auto* recvWire = reinterpret_cast<uint16_t*>(recvMem.data());
  auto* sendWire = reinterpret_cast<uint16_t*>(sendMem.data());
  Scratch accMem = ctx.scratch(o.count * sizeof(T));
  auto* acc = reinterpret_cast<T*>(accMem.data());

  std::vector<std::shared_ptr<RecvRequest>> recvs(steps * nch);
  for (size_t s = 0; s < steps; ++s) {
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      recvs[s * nch + c] = ctx.irecv(left, slotId(s * nch + c), recvWire + s * o.count + ch.begin,
                                     ch.length * ws);
    }
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(steps * nch);
  for (size_t c = 0; c < nch; ++c) {
    Chunk ch = chunkOf(o.count, nch, c);
    uint16_t* wire = sendWire + ch.begin;
    kernels::toWire(wire, in(mod(r - 1, n)) + ch.begin, ch.length, w);
    sends.push_back(ctx.isend(right, slotId(c), wire, ch.length * ws));
  }
  for (size_t s = 0; s < steps; ++s) {
    const int b = mod(r - static_cast<int>(s) - 2, n);
    const bool last = s + 1 == steps;
    for (size_t c = 0; c < nch; ++c) {
      Chunk ch = chunkOf(o.count, nch, c);
      co_await ctx.wait(recvs[s * nch + c]);
      T* sum = (last ? out : acc) + ch.begin;
      std::copy(in(b) + ch.begin, in(b) + ch.begin + ch.length, sum);
      kernels::addWire(sum, recvWire + s * o.count + ch.begin, ch.length, w);
      if (!last) {
        uint16_t* wire = sendWire + (s + 1) * o.count + ch.begin;
        kernels::toWire(wire, sum, ch.length, w);
        sends.push_back(ctx.isend(right, slotId((s + 1) * nch + c), wire, ch.length * ws));
      } else if (o.op == ReduceOp::kAvg) {
        kernels::divide(sum, ch.length, o.dtype, n);
      }
    }
  }
  co_await ctx.waitAll(sends);
}

}  // namespace

Task reduceScatterRingWire(OpContext& ctx, ReduceScatterOptions o) {
  MCCL_CHECK(o.dtype == DataType::kFloat32 || o.dtype == DataType::kFloat64,
             "wire dtype ring: float32 or float64 only");
  const kernels::WireDtype w = wireDtypeOf(ctx.config());
  if (o.dtype == DataType::kFloat64) return ringWire<double>(ctx, o, w);
  return ringWire<float>(ctx, o, w);
}

}  // namespace mccl::algo
