// Helpers shared by the algorithm files: block partitions, pipeline chunks,
// ring neighbours. (Entry points are declared with the table, registry.cc.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/collectives.h"
#include "comm/op_context.h"
#include "comm/task.h"
#include "reduce/wire.h"
#include "util/check.h"

namespace mccl::algo {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// The group's MCCL_WIRE_DTYPE (checked when the group was made), which the
// wire algorithms send and the selector chooses them by.
kernels::WireDtype wireDtypeOf(const CommConfig& cfg);

// `count` elements split into n near-equal blocks (the first count % n get one more).
struct Partition {
  Partition(size_t count, int n);
  size_t offset(int b) const { return off[static_cast<size_t>(b)]; }
  size_t length(int b) const { return len[static_cast<size_t>(b)]; }
  size_t maxLength() const { return len.empty() ? 0 : len[0]; }
  std::vector<size_t> off, len;
};

// A block of `len` elements cut into `nch` pipeline chunks; chunk c is
// [begin, begin + length) relative to the block. Every rank computes the same
// cut from the same sizes, so chunk c means the same bytes everywhere.
struct Chunk {
  size_t begin, length;
};
inline Chunk chunkOf(size_t len, size_t nch, size_t c) {
  size_t b = len * c / nch, e = len * (c + 1) / nch;
  return {b, e - b};
}
// Chunks per block so that none exceeds MCCL_CHUNK_BYTES (at least 1).
size_t chunksFor(size_t maxBlockElems, size_t elemSize, size_t chunkBytes);

// Slot numbers are per message; checks they fit the frame's 32-bit field.
uint32_t slotId(uint64_t value);

// The fold of recursive doubling and Rabenseifner's all-reduce on n ranks
// that are not a power of two: p is the largest power of two <= n and
// rem = n - p. Among the first 2*rem ranks each even one hands its buffer to
// the odd one above it (handOver: it then waits for the result) and the odd
// one adds it (foldIn) and sends the result back at the end (foldOut); the
// p ranks left run the power-of-two algorithm as virtual ranks 0..p-1.
// With `base` (n/2 <= base <= n), p is that instead (recursive multiplying
// folds onto group sizes with small factors).
struct Fold {
  Fold(int n, int rank, int base = 0);
  int p = 1, rem = 0;
  int vr = -1;  // this rank's virtual rank; -1 for a rank that hands over
  bool handsOver() const { return vr < 0; }
  // The real rank of virtual rank v.
  int real(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
};
// The even rank's part: sends `buf` on `inSlot`, receives the result into
// it on `backSlot`.
Task handOver(OpContext& ctx, uint8_t* buf, size_t bytes, uint32_t inSlot, uint32_t backSlot);
// The odd rank's parts: adds the even rank's buffer (received into `tmp`,
// `bytes` long) into `buf`, and later sends it the result. Nothing for the
// ranks beyond the first 2*rem.
Task foldIn(OpContext& ctx, const Fold& f, uint8_t* buf, uint8_t* tmp, size_t count, DataType dtype,
            ReduceOp op, uint32_t inSlot);
Task foldOut(OpContext& ctx, const Fold& f, uint8_t* buf, size_t bytes, uint32_t backSlot);

// Recursive doubling's wider fold (rdLeaders, model.h): n ranks in p
// contiguous blocks whose sizes differ by at most one (the larger first);
// the last rank of each block leads it. With p the largest power of two
// <= n this is Fold's layout: blocks of two (an even rank and the odd one
// above it) and then single ranks.
struct Blocks {
  Blocks(int n, int p);
  int p, q, extra;  // q = n / p; blocks below `extra` have q + 1 ranks
  int start(int v) const { return v * q + (v < extra ? v : extra); }
  int size(int v) const { return q + (v < extra ? 1 : 0); }
  int leader(int v) const { return start(v) + size(v) - 1; }
  int blockOf(int rank) const;
};

// Scales `count` elements of `src` into `dst` for PREMUL_SUM (dst may be src).
void premul(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op, double factor);

}  // namespace mccl::algo
