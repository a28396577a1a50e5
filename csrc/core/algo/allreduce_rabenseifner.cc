// Rabenseifner's all-reduce for medium messages on larger groups: a
// reduce-scatter by recursive halving, then an all-gather by recursive
// doubling. 2 log2(p) steps that together move 2(p-1)/p of the buffer, as
// the ring does in 2(n-1) steps, so the ring's per-step latency is paid
// log2(p) times instead of n-1 times. A group that is not a power of two
// first folds, as recursive doubling does (Fold, common.h): among the
// first 2*rem ranks each even rank hands its whole buffer to the odd rank
// above it and gets the result back at the end (two more full-buffer
// transfers, which the cost model prices).
//
// The buffer is cut into p blocks (the first count % p one element longer).
// Halving step s exchanges half of the current range with the partner at
// distance p/2^(s+1) and adds what arrives, chunk by chunk as it lands; after
// log2(p) steps virtual rank v holds the sum of block v. Doubling steps then
// swap ranges of 1, 2, 4, ... blocks into place. Each block's sum is formed
// once, by its owner, and copied everywhere else, so every rank ends with
// bit-identical results.
//
// Thakur, Rabenseifner, Gropp: "Optimization of collective communication
// operations in MPICH", IJHPCA 19(1), 2005.
#include <algorithm>
#include <memory>
#include <vector>

#include "algo/common.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

Task allreduceRabenseifner(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtypeSize(o.dtype);
  const size_t bytes = o.count * es;
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;

  constexpr uint32_t kFold = 0, kUnfold = 1;
  const Fold f(n, r);
  if (f.handsOver()) {
    co_await handOver(ctx, buf, bytes, kFold, kUnfold);
    co_return;
  }
  const auto combine = kernels::combiner(o.dtype, o.op);
  Scratch tmp = ctx.scratch(bytes + 1);
  co_await foldIn(ctx, f, buf, tmp.data(), o.count, o.dtype, o.op, kFold);
  const int p = f.p, vr = f.vr;
  int levels = 0;
  while ((1 << levels) < p) ++levels;

  const Partition part(o.count, p);
  auto at = [&](int block) { return block == p ? o.count : part.offset(block); };  // element offset
  const size_t chunkBytes = ctx.config().chunkBytes;
  // Step k's messages: slots (k + 2) << 20 onwards, one per chunk; a step
  // of more than 2^20 - 1 chunks (GiBs in 4 KiB chunks) takes larger ones.
  constexpr size_t kMaxChunks = (size_t{1} << 20) - 1;
  auto chunks = [&](size_t elems) { return std::min(chunksFor(elems, es, chunkBytes), kMaxChunks); };
  auto slot = [](int step, size_t chunk) { return slotId((static_cast<uint64_t>(step) + 2) << 20 | chunk); };

  // Sends [sb, se) and receives [rb, re) (element offsets) from `peer`;
  // `add` combines each received chunk into buf as it lands, else it is
  // received in place.
  auto exchange = [&](int step, int peer, size_t sb, size_t se, size_t rb, size_t re, bool add) -> Task {
    const size_t sn = se - sb, rn = re - rb;
    const size_t sch = chunks(sn), rch = chunks(rn);
    uint8_t* dst = add ? tmp.data() : buf;
    std::vector<std::shared_ptr<RecvRequest>> recvs(rch);
    for (size_t c = 0; c < rch; ++c) {
      const Chunk ch = chunkOf(rn, rch, c);
      recvs[c] = ctx.irecv(peer, slot(step, c), dst + (rb + ch.begin) * es, ch.length * es);
    }
    std::vector<std::shared_ptr<SendRequest>> sends;
    sends.reserve(sch);
    for (size_t c = 0; c < sch; ++c) {
      const Chunk ch = chunkOf(sn, sch, c);
      sends.push_back(ctx.isend(peer, slot(step, c), buf + (sb + ch.begin) * es, ch.length * es));
    }
    for (size_t c = 0; c < rch; ++c) {
      co_await ctx.wait(recvs[c]);
      if (add) {
        const Chunk ch = chunkOf(rn, rch, c);
        uint8_t* mine = buf + (rb + ch.begin) * es;
        combine(mine, mine, tmp.data() + (rb + ch.begin) * es, ch.length);
      }
    }
    co_await ctx.waitAll(sends);  // the next step may overwrite what they read
  };

  // Reduce-scatter by recursive halving: keep the half of the range on the
  // side of this rank's bit, send the other half.
  int lo = 0, hi = p;
  for (int s = 0; s < levels; ++s) {
    const int mask = p >> (s + 1), mid = lo + (hi - lo) / 2;
    const bool lower = (vr & mask) == 0;
    const int keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
    const int sendLo = lower ? mid : lo, sendHi = lower ? hi : mid;
    co_await exchange(s, f.real(vr ^ mask), at(sendLo), at(sendHi), at(keepLo), at(keepHi), true);
    lo = keepLo;
    hi = keepHi;
  }
  if (o.op == ReduceOp::kAvg) kernels::divide(buf + at(lo) * es, at(hi) - at(lo), o.dtype, n);

  // All-gather by recursive doubling: swap aligned ranges of 2^s blocks.
  for (int s = 0; s < levels; ++s) {
    const int mask = 1 << s, width = hi - lo;
    const bool lower = (vr & mask) == 0;
    const int otherLo = lower ? hi : lo - width, otherHi = lower ? hi + width : lo;
    co_await exchange(levels + s, f.real(vr ^ mask), at(lo), at(hi), at(otherLo), at(otherHi), false);
    lo = std::min(lo, otherLo);
    hi = std::max(hi, otherHi);
  }

  co_await foldOut(ctx, f, buf, bytes, kUnfold);
}

}  // namespace mccl::algo
