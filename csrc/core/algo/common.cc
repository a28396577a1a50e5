#include "algo/common.h"

#include <algorithm>
#include <cstring>

#include "reduce/parallel.h"
#include "reduce/reduce.h"

namespace mccl::algo {

kernels::WireDtype wireDtypeOf(const CommConfig& cfg) {
  kernels::WireDtype w = kernels::WireDtype::kFp32;
  kernels::parseWireDtype(cfg.wireDtype, &w);
  return w;
}

Partition::Partition(size_t count, int n) {
  const size_t parts = static_cast<size_t>(n);
  off.resize(parts);
  len.resize(parts);
  size_t base = count / parts, extra = count % parts, at = 0;
  for (size_t b = 0; b < parts; ++b) {
    off[b] = at;
    len[b] = base + (b < extra ? 1 : 0);
    at += len[b];
  }
}

size_t chunksFor(size_t maxBlockElems, size_t elemSize, size_t chunkBytes) {
  size_t perChunk = std::max<size_t>(1, chunkBytes / elemSize);
  return std::max<size_t>(1, (maxBlockElems + perChunk - 1) / perChunk);
}

Fold::Fold(int n, int rank, int base) {
  if (base > 0) {
    MCCL_CHECK(base <= n && 2 * (n - base) <= n, "fold of ", n, " ranks onto ", base);
    p = base;
  } else {
    while (p * 2 <= n) p *= 2;
  }
  rem = n - p;
  if (rank >= 2 * rem) {
    vr = rank - rem;
  } else if (rank % 2 == 1) {
    vr = rank / 2;
  }
}

Task handOver(OpContext& ctx, uint8_t* buf, size_t bytes, uint32_t inSlot, uint32_t backSlot) {
  const int to = ctx.rank() + 1;
  auto s = ctx.isend(to, inSlot, buf, bytes);
  co_await ctx.wait(s);
  auto back = ctx.irecv(to, backSlot, buf, bytes);
  co_await ctx.wait(back);
}

Task foldIn(OpContext& ctx, const Fold& f, uint8_t* buf, uint8_t* tmp, size_t count, DataType dtype,
            ReduceOp op, uint32_t inSlot) {
  const int r = ctx.rank();
  if (r >= 2 * f.rem) co_return;
  auto in = ctx.irecv(r - 1, inSlot, tmp, count * dtypeSize(dtype));
  co_await ctx.wait(in);
  kernels::combiner(dtype, op)(buf, buf, tmp, count);
}

Task foldOut(OpContext& ctx, const Fold& f, uint8_t* buf, size_t bytes, uint32_t backSlot) {
  const int r = ctx.rank();
  if (r >= 2 * f.rem) co_return;
  auto s = ctx.isend(r - 1, backSlot, buf, bytes);
  co_await ctx.wait(s);
}

Blocks::Blocks(int n, int leaders) : p(leaders), q(n / leaders), extra(n % leaders) {
  MCCL_CHECK(leaders >= 1 && leaders <= n, "blocks of ", n, " ranks under ", leaders, " leaders");
}

int Blocks::blockOf(int rank) const {
  const int big = extra * (q + 1);  // ranks in the larger blocks
  return rank < big ? rank / (q + 1) : extra + (rank - big) / q;
}

uint32_t slotId(uint64_t value) {
  MCCL_USAGE_CHECK(value <= UINT32_MAX, "message too large for its pipeline: slot ", value,
                   " does not fit 32 bits; raise MCCL_CHUNK_BYTES");
  return static_cast<uint32_t>(value);
}

void premul(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op, double factor) {
  if (op == ReduceOp::kPreMulSum) {
    kernels::scale(dst, src, count, dtype, factor);
  } else if (dst != src) {
    std::memcpy(dst, src, count * dtypeSize(dtype));
  }
}

}  // namespace mccl::algo
