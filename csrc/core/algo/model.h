// Predicted time of each algorithm under the cost model (comm/cost_model.h):
// per message, latency α plus the CPU overhead o of sending and of receiving
// it; per byte, β on the wire and γ to reduce. The selector picks the
// cheapest; docs/architecture.md lists the formulas.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/cost_model.h"
#include "comm/signature.h"

namespace mccl::algo {

// Seconds for `algo` running `op` over `n` ranks: the cost function of its
// row in the algorithm table (registry.h). `bytes` is the buffer of
// allreduce, broadcast and reduce, and the per-rank block of allgather and
// reduce_scatter. `chunkBytes` is the pipeline chunk of chain algorithms.
double predictSeconds(const CostModel& m, OpKind op, Algo algo, size_t bytes, int n,
                      size_t chunkBytes);

// The cost functions the algorithm table refers to (zero on one rank).
double allreduceRingSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double allreduceDirectSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double allreduceRecursiveDoublingSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
// Bruck's all-gather in radix k, then a local fold (allreduce_bruck.cc): the
// radix in [2, n] the model finds fastest for `bytes` on n ranks (the
// smallest on ties; every rank computes the same from the agreed model),
// and the time at that radix.
int bruckRadix(const CostModel& m, size_t bytes, int n);
double allreduceBruckSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
// Recursive multiplying (allreduce_recursive_multiplying.cc): recursive
// doubling generalised to groups of f = 2, 3, 5 or 7 ranks per round, on
// `base` ranks whose size has only those factors (n/2 <= base <= n; the
// other n - base fold in and out as in recursive doubling). The plan the
// model finds fastest for `bytes` on n ranks (the largest base on ties;
// every rank computes the same from the agreed model), and its time.
struct RadixPlan {
  int base = 1;
  std::vector<int> factors;  // in the order of the rounds; their product is base
};
constexpr int kMaxMultiplyingFactor = 7;
RadixPlan radixPlan(const CostModel& m, size_t bytes, int n);
// Recursive doubling's leaders: the power of two p <= n whose plan is the
// cheapest for `bytes` on n ranks (Blocks, common.h: n ranks in p blocks,
// each block's ranks hand their buffers to its last rank, the p leaders run
// log2(p) rounds and send the result back). The largest p is the classic
// fold (blocks of at most two); a smaller one trades rounds for messages
// into and out of each leader. Ties go to the larger p.
int rdLeaders(const CostModel& m, size_t bytes, int n);
// The largest power of two <= n (n >= 1): the classic fold's leaders.
inline int largestPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}
// Recursive doubling's time on `leaders` (a power of two <= n) of n ranks.
double recursiveDoublingSeconds(const CostModel& m, size_t bytes, int n, int leaders);
double allreduceRecursiveMultiplyingSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
// Recursive halving then doubling (allreduce_rabenseifner.cc), with the
// fold of a non-power-of-two group.
double allreduceRabenseifnerSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
// The two-dimensional all-reduce (allreduce_torus.cc) on a grid of
// torusRows(n) rows: the largest divisor of n not above its square root (1
// on a prime n, where it is the ring's reduce-scatter and all-gather).
int torusRows(int n);
bool hasTorusGrid(int n);  // torusRows(n) > 1
double allreduceTorusSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double broadcastChainSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double broadcastBinomialSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double reduceChainSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double reduceBinomialSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double allgatherRingSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double reduceScatterRingSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
// The wire algorithms (registry.h), for float32 buffers: the ring's steps
// with each message's bytes scaled to the wire (16 bits: half; int8: 260
// bytes per 256 values) and the reduction of the float32 values they carry.
// The pairwise exchanges are priced as the ring: the same steps and bytes
// per link. The conversions to and from the wire are not priced.
double allreduceWire16Seconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double allreduceInt8Seconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double reduceScatterWire16Seconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double reduceScatterInt8Seconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
// n-1 messages to or from different peers at once (direct exchanges), with
// and without reducing what arrives.
double exchangeSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double reduceExchangeSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
double disseminationSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes);

// Chunks for a chain broadcast or reduce of `count` elements of `elemSize`
// bytes: the count the model finds fastest among ceil(bytes / chunkBytes)
// times powers of two, down to chunks of kMinChainChunk bytes (or of the
// model's localReadBytes on a shared host). A chain takes
// (n-2+k) steps of one chunk, so medium messages gain from more, smaller
// chunks (1 MiB on 8 hosts at 1 Gbit/s: 16 chunks instead of 1). Every rank
// computes the same from the group's agreed model.
constexpr size_t kMinChainChunk = 64 * 1024;
size_t chainChunks(const CostModel& m, OpKind op, size_t count, size_t elemSize, int n,
                   size_t chunkBytes);

}  // namespace mccl::algo
