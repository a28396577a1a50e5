// The pairwise-exchange all-reduce of float32 on an encoded wire, shared by
// the 16-bit wire (allreduce_pairwise_wire.cc) and the int8 wire
// (allreduce_pairwise_int8.cc); the codec says how a span of values travels.
//
// The buffer is cut into units (one value for the 16-bit wire, a group of
// 256 for int8), the units into n blocks and each block into chunks; unit u
// has its wire image at u * kUnitBytes in a mirror of the whole buffer.
//
// Reduce-scatter: at step k (1..n-1) rank r encodes its own values of block
// r+k once and sends them to that block's owner, and adds rank r-k's values
// of block r (decoded, in float32) into its own. No partial sum is ever
// encoded, so the error does not grow with n. Each step is a permutation of
// the ranks: every link carries one flow each way, (n-1)/n of the buffer in
// all. Step k+1 is sent once step k has arrived (two steps ahead measured
// slower on the 1 Gbit/s lab).
//
// All-gather around the ring: the owner encodes its final block once,
// replaces its float32 copy with the decoded values, and the ring forwards
// those bytes unchanged: every rank ends bit-identical. A region of the
// mirror sent during the reduce-scatter (block b, to its owner) is
// overwritten only by block b's final values, which cannot exist before the
// owner received this rank's contribution.
#pragma once

#include <algorithm>
#include <cstdint>

#include "algo/common.h"
#include "reduce/reduce.h"
#include "reduce/wire.h"
#include "reduce/wire_int8.h"

namespace mccl::algo {

// The DataType a wire algorithm instantiated for T (float or double) serves.
template <class T>
constexpr DataType kWireValue = sizeof(T) == sizeof(double) ? DataType::kFloat64 : DataType::kFloat32;

// A 16-bit wire (bf16, fp16). The owner keeps its own values in float32.
struct Wire16 {
  kernels::WireDtype w;
  static constexpr size_t kUnit = 1, kUnitBytes = sizeof(uint16_t);
  static constexpr bool kEncodeOwn = false;
  static size_t bytes(size_t n) { return n * sizeof(uint16_t); }
  template <class T>
  void encode(uint8_t* out, const T* in, size_t n) const {
    kernels::toWire(reinterpret_cast<uint16_t*>(out), in, n, w);
  }
  template <class T>
  void decode(T* out, const uint8_t* in, size_t n) const {
    kernels::fromWire(out, reinterpret_cast<const uint16_t*>(in), n, w);
  }
  template <class T>
  void add(T* acc, const uint8_t* in, size_t n) const {
    kernels::addWire(acc, reinterpret_cast<const uint16_t*>(in), n, w);
  }
};

// The int8 wire. Every rank encodes all its values once, its own block's
// too, so that a rank's contribution is exactly its buffer's round trip
// (what error feedback keeps the residual of).
struct WireInt8 {
  static constexpr size_t kUnit = kernels::kInt8Group, kUnitBytes = kernels::kInt8GroupBytes;
  static constexpr bool kEncodeOwn = true;
  static size_t bytes(size_t n) { return kernels::int8WireBytes(n); }
  template <class T>
  void encode(uint8_t* out, const T* in, size_t n) const { kernels::toInt8Wire(out, in, n); }
  template <class T>
  void decode(T* out, const uint8_t* in, size_t n) const { kernels::fromInt8Wire(out, in, n); }
  template <class T>
  void add(T* acc, const uint8_t* in, size_t n) const { kernels::addInt8Wire(acc, in, n); }
};

// T is float (float32) or double (float64: the same wire, accumulated in
// float64).
template <class T, class Codec>
Task allreducePairwiseCoded(OpContext& ctx, AllreduceOptions o, Codec codec, const char* what) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.dtype == kWireValue<T> && (o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg), what,
             ": float32 or float64 SUM or AVG only");
  auto* buf = static_cast<T*>(o.buf);
  if (n == 1) co_return;

  const size_t units = (o.count + Codec::kUnit - 1) / Codec::kUnit;
  const Partition blocks(units, n);
  const size_t nch = chunksFor(blocks.maxLength(), Codec::kUnitBytes, ctx.config().chunkBytes);
  const int left = mod(r - 1, n), right = mod(r + 1, n);
  const size_t steps = static_cast<size_t>(n - 1);
  auto slot = [&](size_t phase, size_t step, size_t c) {
    return slotId((phase * steps + step) * nch + c);
  };
  Scratch mirrorMem = ctx.scratch(units * Codec::kUnitBytes);
  uint8_t* mirror = mirrorMem.data();
  struct Span {
    T* f;
    uint8_t* wire;
    size_t len, bytes;
  };
  auto at = [&](int block, size_t c) {
    Chunk ch = chunkOf(blocks.length(block), nch, c);
    const size_t u0 = blocks.offset(block) + ch.begin;
    const size_t e0 = std::min(u0 * Codec::kUnit, o.count);
    const size_t e1 = std::min((u0 + ch.length) * Codec::kUnit, o.count);
    return Span{buf + e0, mirror + u0 * Codec::kUnitBytes, e1 - e0, Codec::bytes(e1 - e0)};
  };

  // Reduce-scatter receives: step k's contribution to this rank's block, in
  // its own area, posted up front.
  const size_t slotBytes = (blocks.maxLength() / nch + 1) * Codec::kUnitBytes;
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
  constexpr size_t kWindow = 1;
  auto sendStep = [&](size_t k) {
    const int dst = mod(r + static_cast<int>(k), n);
    for (size_t c = 0; c < nch; ++c) {
      Span sp = at(dst, c);
      codec.encode(sp.wire, sp.f, sp.len);
      sends.push_back(ctx.isend(dst, slot(0, k - 1, c), sp.wire, sp.bytes));
    }
  };
  for (size_t k = 1; k <= std::min(steps, kWindow); ++k) sendStep(k);
  if constexpr (Codec::kEncodeOwn) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = at(r, c);
      codec.encode(sp.wire, sp.f, sp.len);
      codec.decode(sp.f, sp.wire, sp.len);
    }
  }
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(rs[(k - 1) * nch + c]);
      Span sp = at(r, c);
      codec.add(sp.f, inAt(k, c), sp.len);
    }
    if (k + kWindow <= steps) sendStep(k + kWindow);
  }
  // This rank's block is final: encoded once, kept decoded, sent around.
  for (size_t c = 0; c < nch; ++c) {
    Span sp = at(r, c);
    if (o.op == ReduceOp::kAvg) kernels::divide(sp.f, sp.len, o.dtype, n);
    codec.encode(sp.wire, sp.f, sp.len);
    codec.decode(sp.f, sp.wire, sp.len);
    sends.push_back(ctx.isend(right, slot(1, 0, c), sp.wire, sp.bytes));
  }
  for (size_t t = 0; t < steps; ++t) {
    for (size_t c = 0; c < nch; ++c) {
      co_await ctx.wait(ag[t * nch + c]);
      Span sp = at(mod(r - static_cast<int>(t) - 1, n), c);
      codec.decode(sp.f, sp.wire, sp.len);
      if (t + 1 < steps) sends.push_back(ctx.isend(right, slot(1, t + 1, c), sp.wire, sp.bytes));
    }
  }
  co_await ctx.waitAll(sends);
}

// The reduce-scatter half alone: at step k rank r encodes its input block
// r+k once (units counted from the block's start) and sends it to that
// block's owner, and adds rank r-k's decoded block r into its float32
// output, which starts from its own input exactly.
template <class T, class Codec>
Task reduceScatterPairwiseCoded(OpContext& ctx, ReduceScatterOptions o, Codec codec, const char* what) {
  const int n = ctx.size(), r = ctx.rank();
  MCCL_CHECK(o.dtype == kWireValue<T> && (o.op == ReduceOp::kSum || o.op == ReduceOp::kAvg), what,
             ": float32 or float64 SUM or AVG only");
  auto* out = static_cast<T*>(o.out);
  auto in = [&](int block) { return static_cast<const T*>(o.in[static_cast<size_t>(block)]); };
  if (o.count > 0 && out != in(r)) std::copy(in(r), in(r) + o.count, out);
  if (n == 1) co_return;
  const size_t units = (o.count + Codec::kUnit - 1) / Codec::kUnit;
  const size_t nch = chunksFor(units, Codec::kUnitBytes, ctx.config().chunkBytes);
  const size_t steps = static_cast<size_t>(n - 1);
  const size_t stepBytes = Codec::bytes(o.count);
  struct Span {
    size_t begin, len, wireOff, bytes;
  };
  auto span = [&](size_t c) {
    Chunk ch = chunkOf(units, nch, c);
    const size_t e0 = std::min(ch.begin * Codec::kUnit, o.count);
    const size_t e1 = std::min((ch.begin + ch.length) * Codec::kUnit, o.count);
    return Span{e0, e1 - e0, ch.begin * Codec::kUnitBytes, Codec::bytes(e1 - e0)};
  };
  // Step k's area, sent and received: [(k-1) * stepBytes, k * stepBytes).
  Scratch recvMem = ctx.scratch(steps * stepBytes), sendMem = ctx.scratch(steps * stepBytes);
  std::vector<std::shared_ptr<RecvRequest>> recvs(steps * nch);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = span(c);
      recvs[(k - 1) * nch + c] = ctx.irecv(mod(r - static_cast<int>(k), n), slotId((k - 1) * nch + c),
                                           recvMem.data() + (k - 1) * stepBytes + sp.wireOff, sp.bytes);
    }
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(steps * nch);
  constexpr size_t kWindow = 1;  // steps whose sends may be ahead of arrivals
  auto sendStep = [&](size_t k) {
    const int dst = mod(r + static_cast<int>(k), n);
    for (size_t c = 0; c < nch; ++c) {
      Span sp = span(c);
      uint8_t* wire = sendMem.data() + (k - 1) * stepBytes + sp.wireOff;
      codec.encode(wire, in(dst) + sp.begin, sp.len);
      sends.push_back(ctx.isend(dst, slotId((k - 1) * nch + c), wire, sp.bytes));
    }
  };
  for (size_t k = 1; k <= std::min(steps, kWindow); ++k) sendStep(k);
  for (size_t k = 1; k <= steps; ++k) {
    for (size_t c = 0; c < nch; ++c) {
      Span sp = span(c);
      co_await ctx.wait(recvs[(k - 1) * nch + c]);
      codec.add(out + sp.begin, recvMem.data() + (k - 1) * stepBytes + sp.wireOff, sp.len);
    }
    if (k + kWindow <= steps) sendStep(k + kWindow);
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(out, o.count, o.dtype, n);
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
