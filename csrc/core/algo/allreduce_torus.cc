// Two-dimensional ("2D-torus") all-reduce. The n ranks form a grid of a
// rows by b columns (rank = row * b + column; a is the largest divisor of n
// not above its square root, so 24 = 4 x 6 and 48 = 6 x 8). The buffer is
// cut into b blocks (one per column) and each block into pipeline chunks:
//   1. a reduce-scatter around each row (a ring of b): column j ends with its
//      row's sum of block j;
//   2. as soon as a chunk of its block is final, an all-reduce of that chunk
//      down its column (a ring of a: reduce-scatter of a pieces, then
//      all-gather): the sum over all n ranks;
//   3. as soon as a chunk is through its column, an all-gather of it around
//      the row.
// The phases overlap chunk by chunk, as the ring's reduce-scatter and
// all-gather do, so a phase boundary does not wait for the slowest member
// of a line to end the whole phase. 2(b-1) + 2(a-1) steps (16 on 24 ranks,
// against the ring's 46) that move the ring's 2(n-1)/n of the buffer per
// rank, with no fold. On a prime n (a = 1) it is the ring's reduce-scatter
// and all-gather. Each element's sum is formed once, in its column's
// reduce-scatter, and copied everywhere else, so every rank ends with
// bit-identical results.
//
// Mikami et al., "Massively Distributed SGD: ImageNet/ResNet-50 Training in
// a Flash", arXiv:1811.05233 (2018), section 3.
#include <algorithm>
#include <memory>
#include <vector>

#include "algo/common.h"
#include "algo/model.h"
#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {
namespace {

// Scratch slots of each reduce-scatter (the ring's K).
constexpr size_t kRecvSlots = 8;

// A ring of real ranks (`ranks`, in ring order) in which this rank is
// member `me`.
struct Line {
  std::vector<int> ranks;
  int me = 0;
  int size() const { return static_cast<int>(ranks.size()); }
  int left() const { return ranks[static_cast<size_t>(mod(me - 1, size()))]; }
  int right() const { return ranks[static_cast<size_t>(mod(me + 1, size()))]; }
};

// Piece q of a chunk of `len` elements cut into a near-equal pieces.
Chunk pieceOf(size_t len, int a, int q) {
  const size_t base = len / static_cast<size_t>(a), extra = len % static_cast<size_t>(a);
  const size_t uq = static_cast<size_t>(q);
  return {uq * base + std::min(uq, extra), base + (uq < extra ? 1 : 0)};
}

// Phase p's message for item i: 2 bits of phase, 30 of item.
uint32_t phaseSlot(uint32_t phase, size_t item) {
  MCCL_CHECK(item < (size_t{1} << 30), "torus all-reduce: ", item, " messages in one phase");
  return slotId(static_cast<uint64_t>(phase) << 30 | item);
}

enum Phase : uint32_t { kRowRs = 0, kColRs = 1, kColAg = 2, kRowAg = 3 };

}  // namespace

Task allreduceTorus(OpContext& ctx, AllreduceOptions o) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtypeSize(o.dtype);
  auto* buf = static_cast<uint8_t*>(o.buf);
  premul(buf, buf, o.count, o.dtype, o.op, o.premulFactor);
  if (n == 1) co_return;

  const int a = torusRows(n), b = n / a;
  const int row = r / b, col = r % b;
  Line across, down;
  for (int j = 0; j < b; ++j) across.ranks.push_back(row * b + j);
  for (int i = 0; i < a; ++i) down.ranks.push_back(i * b + col);
  across.me = col;
  down.me = row;
  const auto combine = kernels::combiner(o.dtype, o.op);
  const bool avg = o.op == ReduceOp::kAvg;

  // The row's blocks and their chunks: chunk c of block j.
  const Partition blocks(o.count, b);
  const size_t nch = chunksFor(blocks.maxLength(), es, ctx.config().chunkBytes);
  auto chunk = [&](int j, size_t c, size_t* len) {
    const int jb = mod(j, b);
    const Chunk ch = chunkOf(blocks.length(jb), nch, c);
    *len = ch.length;
    return buf + (blocks.offset(jb) + ch.begin) * es;
  };
  // Piece q (mod a) of chunk c of this rank's block.
  auto piece = [&](size_t c, int q, size_t* len) {
    size_t clen = 0;
    uint8_t* p = chunk(col, c, &clen);
    const Chunk pc = pieceOf(clen, a, mod(q, a));
    *len = pc.length;
    return p + pc.begin * es;
  };
  std::vector<std::shared_ptr<SendRequest>> sends;
  auto send = [&](int peer, Phase ph, size_t item, const uint8_t* p, size_t len) {
    sends.push_back(ctx.isend(peer, phaseSlot(ph, item), p, len * es));
  };

  // 1. Row reduce-scatter: item i = step * nch + chunk; step s adds block
  // col-s-2 (arriving in k recycled slots) and forwards it, the last step
  // finishes block col.
  const size_t rowSteps = static_cast<size_t>(b - 1), rsItems = rowSteps * nch;
  const size_t k = std::min(rsItems, kRecvSlots);
  const size_t slotBytes = (blocks.maxLength() / nch + 1) * es;
  Scratch rsTmp = ctx.scratch(k * slotBytes);
  std::vector<std::shared_ptr<RecvRequest>> rs(rsItems);
  auto postRs = [&](size_t i) {
    size_t len = 0;
    chunk(col - static_cast<int>(i / nch) - 2, i % nch, &len);
    rs[i] = ctx.irecv(across.left(), phaseSlot(kRowRs, i), rsTmp.data() + (i % k) * slotBytes, len * es);
  };
  // 2. Column all-reduce of each chunk: item j = chunk * (a-1) + step, for
  // its reduce-scatter (piece row-s-2 arrives, in slots) and its all-gather
  // (piece row-t-1 arrives in place).
  const size_t colSteps = static_cast<size_t>(a - 1), colItems = nch * colSteps;
  const size_t kc = std::min(colItems, kRecvSlots);
  const size_t pieceBytes = ((blocks.maxLength() / nch + 1) / static_cast<size_t>(a) + 1) * es;
  Scratch colTmp = ctx.scratch(std::max<size_t>(kc, 1) * pieceBytes);
  std::vector<std::shared_ptr<RecvRequest>> crs(colItems), cag(colItems);
  auto postColRs = [&](size_t j) {
    size_t len = 0;
    piece(j / colSteps, row - static_cast<int>(j % colSteps) - 2, &len);
    crs[j] = ctx.irecv(down.left(), phaseSlot(kColRs, j), colTmp.data() + (j % kc) * pieceBytes, len * es);
  };
  // 3. Row all-gather: item i = step * nch + chunk; step t brings chunk c of
  // block col-t-1 in place.
  std::vector<std::shared_ptr<RecvRequest>> ag(rsItems);

  for (size_t i = 0; i < k; ++i) postRs(i);
  for (size_t j = 0; j < kc; ++j) postColRs(j);
  for (size_t j = 0; j < colItems; ++j) {
    size_t len = 0;
    uint8_t* p = piece(j / colSteps, row - static_cast<int>(j % colSteps) - 1, &len);
    cag[j] = ctx.irecv(down.left(), phaseSlot(kColAg, j), p, len * es);
  }
  for (size_t i = 0; i < rsItems; ++i) {
    size_t len = 0;
    uint8_t* p = chunk(col - static_cast<int>(i / nch) - 1, i % nch, &len);
    ag[i] = ctx.irecv(across.left(), phaseSlot(kRowAg, i), p, len * es);
  }
  for (size_t c = 0; c < nch; ++c) {
    size_t len = 0;
    const uint8_t* p = chunk(col - 1, c, &len);
    send(across.right(), kRowRs, c, p, len);
  }

  // Chunk c of this rank's block is through its column: the all-gather
  // around the row starts.
  auto startRowAg = [&](size_t c) {
    size_t len = 0;
    const uint8_t* p = chunk(col, c, &len);
    send(across.right(), kRowAg, c, p, len);
  };
  // This rank's piece of chunk c is final: its column's all-gather starts.
  std::vector<uint8_t> pieceDone(nch, 0), gathered(nch, 0);
  auto pieceFinal = [&](size_t c) {
    size_t len = 0;
    uint8_t* p = piece(c, row, &len);
    if (avg) kernels::divide(p, len, o.dtype, n);
    pieceDone[c] = 1;
    send(down.right(), kColAg, c * colSteps, p, len);
    if (gathered[c]) startRowAg(c);
  };

  size_t iRs = 0, jRs = 0, jAg = 0, iAg = 0, rowFinal = 0;
  // Each flow's next item, processed once it is done (and, for the column's
  // reduce-scatter, once its chunk is final in the row).
  auto rowRsStep = [&] {
    const size_t i = iRs++, s = i / nch, c = i % nch;
    size_t len = 0;
    uint8_t* p = chunk(col - static_cast<int>(s) - 2, c, &len);
    combine(p, p, rsTmp.data() + (i % k) * slotBytes, len);
    if (i + k < rsItems) postRs(i + k);
    if (s + 1 < rowSteps) {
      send(across.right(), kRowRs, i + nch, p, len);
      return;
    }
    ++rowFinal;  // chunk c of block col holds the row's sum
    if (a == 1) {
      if (avg) kernels::divide(p, len, o.dtype, n);
      startRowAg(c);
      return;
    }
    size_t plen = 0;
    const uint8_t* q = piece(c, row - 1, &plen);
    send(down.right(), kColRs, c * colSteps, q, plen);
  };
  auto colRsStep = [&] {
    const size_t j = jRs++, c = j / colSteps, s = j % colSteps;
    size_t len = 0;
    uint8_t* p = piece(c, row - static_cast<int>(s) - 2, &len);
    combine(p, p, colTmp.data() + (j % kc) * pieceBytes, len);
    if (j + kc < colItems) postColRs(j + kc);
    if (s + 1 < colSteps) {
      send(down.right(), kColRs, j + 1, p, len);
    } else {
      pieceFinal(c);
    }
  };
  auto colAgStep = [&] {
    const size_t j = jAg++, c = j / colSteps, t = j % colSteps;
    if (t + 1 < colSteps) {
      size_t len = 0;
      const uint8_t* p = piece(c, row - static_cast<int>(t) - 1, &len);
      send(down.right(), kColAg, j + 1, p, len);
      return;
    }
    gathered[c] = 1;
    if (pieceDone[c]) startRowAg(c);
  };
  auto rowAgStep = [&] {
    const size_t i = iAg++;
    if (i + nch < rsItems) {
      size_t len = 0;
      const uint8_t* p = chunk(col - static_cast<int>(i / nch) - 1, i % nch, &len);
      send(across.right(), kRowAg, i + nch, p, len);
    }
  };

  // Serve the four flows in order of what is done; wait for any receive
  // when none is (the row's reduce-scatter feeds the others, so its next
  // item is named first on a timeout).
  for (;;) {
    const uint64_t seen = ctx.received();
    bool progressed = false;
    while (iRs < rsItems && rs[iRs]->done()) {
      co_await ctx.wait(rs[iRs]);
      rowRsStep();
      progressed = true;
    }
    while (jRs < colItems && jRs / colSteps < rowFinal && crs[jRs]->done()) {
      co_await ctx.wait(crs[jRs]);
      colRsStep();
      progressed = true;
    }
    while (jAg < colItems && cag[jAg]->done()) {
      co_await ctx.wait(cag[jAg]);
      colAgStep();
      progressed = true;
    }
    while (iAg < rsItems && ag[iAg]->done()) {
      co_await ctx.wait(ag[iAg]);
      rowAgStep();
      progressed = true;
    }
    if (progressed) continue;
    std::shared_ptr<Transfer> next;
    if (iRs < rsItems) {
      next = rs[iRs];
    } else if (jRs < colItems) {
      next = crs[jRs];
    } else if (jAg < colItems) {
      next = cag[jAg];
    } else if (iAg < rsItems) {
      next = ag[iAg];
    } else {
      break;
    }
    co_await ctx.waitProgress(seen, next);
  }
  co_await ctx.waitAll(sends);
}

}  // namespace mccl::algo
