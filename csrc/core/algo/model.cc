#include "algo/model.h"

#include "algo/common.h"
#include "reduce/wire_int8.h"

#include <algorithm>
#include <cmath>

namespace mccl::algo {
namespace {

// One step of an algorithm: a rank sends and receives `xs` bytes. Its CPU
// work per message (2o: post, copy, complete) overlaps the wire time of the
// data, so a step costs latency plus the larger of the two; local reduction
// of what arrived comes after.
double stepSeconds(const CostModel& m, double xs, double reduce, double share = 1.0) {
  const double a = m.alphaUs * 1e-6, o = m.overheadUs * 1e-6;
  const double b = m.betaNsPerByte * 1e-9 * share, g = m.gammaNsPerByte * 1e-9;
  return a + std::max(2 * o, xs * b) + reduce * xs * g;
}

// On a shared host, a step with `flows` transfers at once costs flows/n of
// β per byte (β was measured with the ring's n at once); elsewhere each link
// is its own wire.
double shareOf(const CostModel& m, double flows, int n) {
  return m.sharedHost ? std::min(1.0, flows / n) : 1.0;
}

double chainSeconds(const CostModel& m, OpKind op, double bytes, int n, size_t chunks) {
  const double k = static_cast<double>(chunks);
  return (n - 2 + k) * stepSeconds(m, bytes / k, op == OpKind::kReduce ? 1 : 0, shareOf(m, n - 1, n));
}

// ceil(log2 n) rounds; round j has min(2^j, n - 2^j) transfers at once.
double binomialSeconds(const CostModel& m, OpKind op, double bytes, int n) {
  double t = 0;
  for (int span = 1; span < n; span *= 2) {
    t += stepSeconds(m, bytes, op == OpKind::kReduce ? 1 : 0, shareOf(m, std::min(span, n - span), n));
  }
  return t;
}

// k messages to or from different peers at once (direct algorithms).
double fan(const CostModel& m, double k, double xs, double reduce) {
  const double a = m.alphaUs * 1e-6, o = m.overheadUs * 1e-6;
  const double b = m.betaNsPerByte * 1e-9, g = m.gammaNsPerByte * 1e-9;
  return a + std::max(2 * k * o, k * xs * b) + reduce * k * xs * g;
}

}  // namespace

size_t chainChunks(const CostModel& m, OpKind op, size_t count, size_t elemSize, int n,
                   size_t chunkBytes) {
  const size_t first = chunksFor(count, elemSize, chunkBytes);
  const double bytes = static_cast<double>(count) * static_cast<double>(elemSize);
  // On a shared host, smaller chunks than the same-host read threshold would
  // leave the path β was measured on (they go over TCP loopback).
  const double minChunk = static_cast<double>(std::max(kMinChainChunk, m.localReadBytes));
  size_t best = first;
  double bestTime = chainSeconds(m, op, bytes, n, first);
  for (size_t k = first * 2; k <= count && bytes / static_cast<double>(k) >= minChunk; k *= 2) {
    const double t = chainSeconds(m, op, bytes, n, k);
    if (t < bestTime) {
      best = k;
      bestTime = t;
    }
  }
  return best;
}

double allreduceRingSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  const double x = static_cast<double>(bytes), nn = n;
  return (nn - 1) * (stepSeconds(m, x / nn, 1) + stepSeconds(m, x / nn, 0));
}

double allreduceDirectSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  return n <= 1 ? 0.0 : fan(m, n - 1, static_cast<double>(bytes), 1);
}

namespace {

// Bruck's all-gather of n blocks of `bytes` in radix k, then folding them.
double bruckSeconds(const CostModel& m, double bytes, int n, int64_t k) {
  const double a = m.alphaUs * 1e-6, o = m.overheadUs * 1e-6;
  const double b = m.betaNsPerByte * 1e-9, g = m.gammaNsPerByte * 1e-9;
  double t = 0;
  for (int64_t d = 1; d < n; d *= k) {
    // Peers i = 1 .. k-1 with i*d < n; together they bring the blocks
    // [d, min(k*d, n)).
    const double msgs = static_cast<double>(std::min<int64_t>(k - 1, (n - 1) / d));
    const double blocks = static_cast<double>(std::min<int64_t>((k - 1) * d, n - d));
    t += a + std::max(2 * msgs * o, blocks * bytes * b);
  }
  return t + (n - 1) * bytes * g;
}

}  // namespace

int bruckRadix(const CostModel& m, size_t bytes, int n) {
  int best = 2;
  double bestTime = bruckSeconds(m, static_cast<double>(bytes), n, 2);
  for (int k = 3; k <= n; ++k) {
    const double t = bruckSeconds(m, static_cast<double>(bytes), n, k);
    if (t < bestTime) {
      best = k;
      bestTime = t;
    }
  }
  return best;
}

double allreduceBruckSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  return bruckSeconds(m, static_cast<double>(bytes), n, bruckRadix(m, bytes, n));
}

namespace {

// The fold of n ranks onto `base` (Fold, common.h): the whole buffer in,
// reduced, and the result out; nothing when base == n.
double foldSeconds(const CostModel& m, double bytes, int n, int base) {
  return base == n ? 0.0 : stepSeconds(m, bytes, 1) + stepSeconds(m, bytes, 0);
}

// Rounds in groups of f (f-1 whole-buffer exchanges at once, each followed
// by f-1 reductions), plus the fold in (reduced) and out when base < n.
// Recursive doubling is the plan of all twos on the largest power of two:
// both algorithms are priced by this one sum, so where their schedules are
// the same their costs are equal to the bit and the table's order decides.
double multiplyingSeconds(const CostModel& m, double bytes, int n, int base, const int* factors,
                          size_t rounds) {
  double t = foldSeconds(m, bytes, n, base);
  for (size_t i = 0; i < rounds; ++i) t += fan(m, factors[i] - 1, bytes, 1);
  return t;
}

// base's factors 2, 3, 5 and 7 in ascending order into `out` (room for 32);
// their count, or -1 when base has a larger prime factor.
int smallFactors(int base, int* out) {
  int k = 0;
  for (int f = 2; f <= kMaxMultiplyingFactor; ++f) {
    while (base % f == 0) {
      out[k++] = f;
      base /= f;
    }
  }
  return base == 1 ? k : -1;
}

// Recursive doubling on p leaders of n ranks (blocks of at most g =
// ceil(n/p) ranks): the blocks' buffers in (g-1 messages into a leader,
// each reduced), log2(p) exchange rounds, the result out (g-1 messages from
// a leader). A leader pays o for each of its g-1 messages and the member
// one for its own, so a fold step costs a + max(g*o, (g-1)*x*b); with
// blocks of at most two this is stepSeconds, and the whole plan is
// multiplyingSeconds' fold and rounds of two, to the bit.
double leadersSeconds(const CostModel& m, double bytes, int n, int p) {
  const int g = (n + p - 1) / p;
  double t = 0.0;
  if (g > 1) {
    const double a = m.alphaUs * 1e-6, o = m.overheadUs * 1e-6;
    const double b = m.betaNsPerByte * 1e-9, gam = m.gammaNsPerByte * 1e-9, k = g - 1;
    t += a + std::max(g * o, k * bytes * b) + k * bytes * gam;  // in, reduced
    t += a + std::max(g * o, k * bytes * b);                     // out
  }
  for (int q = 1; q < p; q *= 2) t += fan(m, 1, bytes, 1);
  return t;
}

}  // namespace

int rdLeaders(const CostModel& m, size_t bytes, int n) {
  const int p = largestPowerOfTwo(n);
  int best = p;
  double bestTime = leadersSeconds(m, static_cast<double>(bytes), n, p);
  for (int q = p / 2; q >= 1; q /= 2) {
    const double t = leadersSeconds(m, static_cast<double>(bytes), n, q);
    if (t < bestTime) {
      best = q;
      bestTime = t;
    }
  }
  return best;
}

double recursiveDoublingSeconds(const CostModel& m, size_t bytes, int n, int leaders) {
  return n <= 1 ? 0.0 : leadersSeconds(m, static_cast<double>(bytes), n, leaders);
}

double allreduceRecursiveDoublingSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  return leadersSeconds(m, static_cast<double>(bytes), n, rdLeaders(m, bytes, n));
}

RadixPlan radixPlan(const CostModel& m, size_t bytes, int n) {
  int bestBase = 1;
  double bestTime = 0;
  bool found = false;
  int factors[32];
  for (int base = n; base >= 1 && 2 * (n - base) <= n; --base) {
    const int k = smallFactors(base, factors);
    if (k < 0) continue;
    const double t = multiplyingSeconds(m, static_cast<double>(bytes), n, base, factors, static_cast<size_t>(k));
    if (!found || t < bestTime) {
      bestBase = base;
      bestTime = t;
      found = true;
    }
  }
  RadixPlan plan{bestBase, {}};
  plan.factors.assign(factors, factors + smallFactors(bestBase, factors));
  return plan;
}

double allreduceRecursiveMultiplyingSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  const RadixPlan p = radixPlan(m, bytes, n);
  return multiplyingSeconds(m, static_cast<double>(bytes), n, p.base, p.factors.data(), p.factors.size());
}

double allreduceRabenseifnerSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  const int p = largestPowerOfTwo(n);
  const double x = static_cast<double>(bytes);
  double t = foldSeconds(m, x, n, p);
  for (int part = 2; part <= p; part *= 2) {
    t += stepSeconds(m, x / part, 1) + stepSeconds(m, x / part, 0);  // halving, doubling
  }
  return t;
}

int torusRows(int n) {
  int rows = 1;
  for (int a = 2; a * a <= n; ++a) {
    if (n % a == 0) rows = a;
  }
  return rows;
}

bool hasTorusGrid(int n) { return torusRows(n) > 1; }

// Reduce-scatter along a row of b (steps of x/b), all-reduce down a column
// of a (steps of x/n each way), all-gather along the row. The phases overlap
// chunk by chunk, but when the row's blocks span several chunks the last
// one still crosses its column and the row after the others are done: that
// tail is charged (1 - 1/chunks) of a chunk's wire time, up to one chunk. On
// the VM's 6-host lab (1 Gbit/s, CUBIC, interleaved with the ring; docs/data/
// torus_large_n6_vm.json) the torus took 0-0.4 chunk times longer than the
// ring from 4 to 64 MiB. With one chunk per block nothing is charged: there
// the steps are the whole cost (48 hosts, 256 KiB: 4.31 ms measured, 4.30
// predicted by the lab's fitted model).
double allreduceTorusSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes) {
  if (n <= 1) return 0.0;
  const int a = torusRows(n), b = n / a;
  const double x = static_cast<double>(bytes), block = x / b;
  const double chunks = std::max(1.0, std::ceil(block / static_cast<double>(std::max<size_t>(chunkBytes, 1))));
  const double tail = (1.0 - 1.0 / chunks) * (block / chunks) * m.betaNsPerByte * 1e-9;
  return (b - 1) * (stepSeconds(m, block, 1) + stepSeconds(m, block, 0)) +
         (a - 1) * (stepSeconds(m, x / n, 1) + stepSeconds(m, x / n, 0)) + tail;
}

double broadcastChainSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes) {
  if (n <= 1) return 0.0;
  return chainSeconds(m, OpKind::kBroadcast, static_cast<double>(bytes), n,
                      chainChunks(m, OpKind::kBroadcast, bytes, 1, n, chunkBytes));
}

double broadcastBinomialSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  return n <= 1 ? 0.0 : binomialSeconds(m, OpKind::kBroadcast, static_cast<double>(bytes), n);
}

double reduceChainSeconds(const CostModel& m, size_t bytes, int n, size_t chunkBytes) {
  if (n <= 1) return 0.0;
  return chainSeconds(m, OpKind::kReduce, static_cast<double>(bytes), n,
                      chainChunks(m, OpKind::kReduce, bytes, 1, n, chunkBytes));
}

double reduceBinomialSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  return n <= 1 ? 0.0 : binomialSeconds(m, OpKind::kReduce, static_cast<double>(bytes), n);
}

double allgatherRingSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  return n <= 1 ? 0.0 : (n - 1) * stepSeconds(m, static_cast<double>(bytes), 0);
}

double reduceScatterRingSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  return n <= 1 ? 0.0 : (n - 1) * stepSeconds(m, static_cast<double>(bytes), 1);
}

namespace {

// Wire bytes per float32 byte.
constexpr double kWire16Ratio = 0.5;
constexpr double kInt8Ratio =
    static_cast<double>(kernels::kInt8GroupBytes) / (kernels::kInt8Group * sizeof(float));

// A ring step that sends and receives `ratio` of x bytes of float32 and, with
// `reduce`, adds the x bytes they decode to.
double wireStepSeconds(const CostModel& m, double x, double ratio, bool reduce) {
  return stepSeconds(m, ratio * x, reduce ? 1.0 / ratio : 0.0);
}

double allreduceWireSeconds(const CostModel& m, size_t bytes, int n, double ratio) {
  if (n <= 1) return 0.0;
  const double x = static_cast<double>(bytes), nn = n;
  return (nn - 1) * (wireStepSeconds(m, x / nn, ratio, true) + wireStepSeconds(m, x / nn, ratio, false));
}

double reduceScatterWireSeconds(const CostModel& m, size_t bytes, int n, double ratio) {
  return n <= 1 ? 0.0 : (n - 1) * wireStepSeconds(m, static_cast<double>(bytes), ratio, true);
}

}  // namespace

double allreduceWire16Seconds(const CostModel& m, size_t bytes, int n, size_t) {
  return allreduceWireSeconds(m, bytes, n, kWire16Ratio);
}

double allreduceInt8Seconds(const CostModel& m, size_t bytes, int n, size_t) {
  return allreduceWireSeconds(m, bytes, n, kInt8Ratio);
}

double reduceScatterWire16Seconds(const CostModel& m, size_t bytes, int n, size_t) {
  return reduceScatterWireSeconds(m, bytes, n, kWire16Ratio);
}

double reduceScatterInt8Seconds(const CostModel& m, size_t bytes, int n, size_t) {
  return reduceScatterWireSeconds(m, bytes, n, kInt8Ratio);
}

double exchangeSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  return n <= 1 ? 0.0 : fan(m, n - 1, static_cast<double>(bytes), 0);
}

double reduceExchangeSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  return n <= 1 ? 0.0 : fan(m, n - 1, static_cast<double>(bytes), 1);
}

double disseminationSeconds(const CostModel& m, size_t, int n, size_t) {
  return n <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(n))) * stepSeconds(m, 0, 0);
}

}  // namespace mccl::algo
