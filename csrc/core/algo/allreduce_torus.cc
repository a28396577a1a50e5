// Two-dimensional ("2D-torus") all-reduce for medium messages on groups
// that are not a power of two. The n ranks form a grid of a rows by b
// columns (rank = row * b + column; a is the largest divisor of n not above
// its square root, so 24 = 4 x 6 and 48 = 6 x 8):
//   1. a reduce-scatter around each row (a ring of b): column j ends with its
//      row's sum of block j of b;
//   2. an all-reduce of that block down each column (a ring of a:
//      reduce-scatter, then all-gather): the sum over all n ranks;
//   3. an all-gather around each row.
// 2(b-1) + 2(a-1) steps (16 on 24 ranks, against the ring's 46) that move
// the ring's 2(n-1)/n of the buffer per rank, with no fold. On a prime n
// (a = 1) it is the ring's reduce-scatter and all-gather. Each element's sum
// is formed once, in its column's reduce-scatter, and copied everywhere
// else, so every rank ends with bit-identical results.
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

// A ring of real ranks (`ranks`, in ring order) in which this rank is
// member `me`, working on the elements [base, base + count) of a buffer cut
// into ranks.size() blocks (Partition).
// Scratch slots of a line's reduce-scatter (the ring's K).
constexpr size_t kRecvSlots = 8;

struct Line {
  std::vector<int> ranks;
  int me = 0;
  int size() const { return static_cast<int>(ranks.size()); }
  int left() const { return ranks[static_cast<size_t>(mod(me - 1, size()))]; }
  int right() const { return ranks[static_cast<size_t>(mod(me + 1, size()))]; }
};

struct Span {
  uint8_t* buf;  // the whole buffer
  size_t base, count, es;
};

// The span cut into one block per member of `line`, each block into the
// same number of pipeline chunks; item i is chunk i % chunks of step
// i / chunks.
struct Blocks {
  Blocks(OpContext& ctx, const Line& line, Span sp)
      : sp(sp), m(line.size()), part(sp.count, m),
        chunks(chunksFor(part.maxLength(), sp.es, ctx.config().chunkBytes)),
        items(static_cast<size_t>(m - 1) * chunks) {}
  // Chunk c of block `block` (taken mod m): its first byte, and its length
  // in elements in *len.
  uint8_t* at(int block, size_t c, size_t* len) const {
    const int b = mod(block, m);
    const Chunk ch = chunkOf(part.length(b), chunks, c);
    *len = ch.length;
    return sp.buf + (sp.base + part.offset(b) + ch.begin) * sp.es;
  }
  Span sp;
  int m;
  Partition part;
  size_t chunks, items;
};

// Phase p's message for item i (step * chunks + chunk): 2 bits of phase,
// 30 of item.
uint32_t phaseSlot(uint32_t phase, size_t item) {
  MCCL_CHECK(item < (size_t{1} << 30), "torus all-reduce: ", item, " messages in one phase");
  return slotId(static_cast<uint64_t>(phase) << 30 | item);
}

// Reduce-scatter in place: member i ends with the sum of block i. Step s
// sends block i-s-1 (this rank's own at s = 0, then the partial sum it just
// formed) and adds what arrives of block i-s-2; no block is changed after it
// was sent, and block i is never sent. Chunks of consecutive steps flow as
// a pipeline. `avg` divides the finished block by it (0: no division).
Task lineReduceScatter(OpContext& ctx, const Line& line, Span sp, uint32_t phase,
                       const kernels::Combiner& combine, DataType dtype, int avg) {
  if (line.size() == 1) co_return;
  const Blocks bl(ctx, line, sp);
  const size_t nch = bl.chunks, steps = bl.items / nch;
  // Receives go to k scratch slots, recycled in order (as the ring's).
  const size_t k = std::min<size_t>(bl.items, kRecvSlots);
  const size_t slotBytes = (bl.part.maxLength() / nch + 1) * sp.es;
  Scratch tmp = ctx.scratch(k * slotBytes);
  std::vector<std::shared_ptr<RecvRequest>> recvs(bl.items);
  auto post = [&](size_t i) {
    size_t len = 0;
    bl.at(line.me - static_cast<int>(i / nch) - 2, i % nch, &len);
    recvs[i] = ctx.irecv(line.left(), phaseSlot(phase, i), tmp.data() + (i % k) * slotBytes, len * sp.es);
  };
  for (size_t i = 0; i < k; ++i) post(i);
  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(bl.items);
  for (size_t c = 0; c < nch; ++c) {
    size_t len = 0;
    uint8_t* p = bl.at(line.me - 1, c, &len);
    sends.push_back(ctx.isend(line.right(), phaseSlot(phase, c), p, len * sp.es));
  }
  for (size_t i = 0; i < bl.items; ++i) {
    const size_t s = i / nch, c = i % nch;
    size_t len = 0;
    uint8_t* p = bl.at(line.me - static_cast<int>(s) - 2, c, &len);
    co_await ctx.wait(recvs[i]);
    combine(p, p, tmp.data() + (i % k) * slotBytes, len);
    if (i + k < bl.items) post(i + k);
    if (s + 1 < steps) {
      sends.push_back(ctx.isend(line.right(), phaseSlot(phase, i + nch), p, len * sp.es));
    } else if (avg > 0) {
      kernels::divide(p, len, dtype, avg);
    }
  }
  co_await ctx.waitAll(sends);
}

// All-gather in place: member i starts with block i and ends with all of
// them. Receives land in their final place and are posted first.
Task lineAllgather(OpContext& ctx, const Line& line, Span sp, uint32_t phase) {
  if (line.size() == 1) co_return;
  const Blocks bl(ctx, line, sp);
  const size_t nch = bl.chunks;
  std::vector<std::shared_ptr<RecvRequest>> recvs(bl.items);
  for (size_t i = 0; i < bl.items; ++i) {
    size_t len = 0;
    uint8_t* p = bl.at(line.me - static_cast<int>(i / nch) - 1, i % nch, &len);
    recvs[i] = ctx.irecv(line.left(), phaseSlot(phase, i), p, len * sp.es);
  }
  std::vector<std::shared_ptr<SendRequest>> sends;
  sends.reserve(bl.items);
  for (size_t c = 0; c < nch; ++c) {
    size_t len = 0;
    uint8_t* p = bl.at(line.me, c, &len);
    sends.push_back(ctx.isend(line.right(), phaseSlot(phase, c), p, len * sp.es));
  }
  for (size_t i = 0; i + nch < bl.items; ++i) {
    co_await ctx.wait(recvs[i]);
    size_t len = 0;
    uint8_t* p = bl.at(line.me - static_cast<int>(i / nch) - 1, i % nch, &len);
    sends.push_back(ctx.isend(line.right(), phaseSlot(phase, i + nch), p, len * sp.es));
  }
  co_await ctx.waitAll(recvs);
  co_await ctx.waitAll(sends);
}

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
  const int avg = o.op == ReduceOp::kAvg ? n : 0;
  const Partition blocks(o.count, b);
  const Span whole{buf, 0, o.count, es};
  const Span mine{buf, blocks.offset(col), blocks.length(col), es};
  co_await lineReduceScatter(ctx, across, whole, 0, combine, o.dtype, a == 1 ? avg : 0);
  co_await lineReduceScatter(ctx, down, mine, 1, combine, o.dtype, avg);
  co_await lineAllgather(ctx, down, mine, 2);
  co_await lineAllgather(ctx, across, whole, 3);
}

}  // namespace mccl::algo
