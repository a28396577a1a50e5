#include "algo/model.h"

#include "algo/common.h"

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

double allreduceRecursiveDoublingSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  // Non-powers of two fold the extra ranks in and out: two more rounds.
  const double rounds = std::log2(static_cast<double>(p)) + (p == n ? 0 : 2);
  return rounds * stepSeconds(m, static_cast<double>(bytes), 1);
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

// Rounds of f-1 whole-buffer exchanges at once, each followed by f-1
// reductions, plus the fold in and out when base < n.
double multiplyingSeconds(const CostModel& m, double bytes, int n, const RadixPlan& plan) {
  double t = plan.base == n ? 0.0 : stepSeconds(m, bytes, 1) + stepSeconds(m, bytes, 0);
  for (int f : plan.factors) t += fan(m, f - 1, bytes, 1);
  return t;
}

}  // namespace

RadixPlan radixPlan(const CostModel& m, size_t bytes, int n) {
  RadixPlan best;
  double bestTime = 0;
  bool found = false;
  for (int base = n; base >= 1 && 2 * (n - base) <= n; --base) {
    RadixPlan plan{base, {}};
    int rest = base;
    for (int f = 2; f <= kMaxMultiplyingFactor; ++f) {
      while (rest % f == 0) {
        plan.factors.push_back(f);
        rest /= f;
      }
    }
    if (rest != 1) continue;  // a factor above kMaxMultiplyingFactor
    const double t = multiplyingSeconds(m, static_cast<double>(bytes), n, plan);
    if (!found || t < bestTime) {
      best = plan;
      bestTime = t;
      found = true;
    }
  }
  return best;
}

double allreduceRecursiveMultiplyingSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  return multiplyingSeconds(m, static_cast<double>(bytes), n, radixPlan(m, bytes, n));
}

double allreduceRabenseifnerSeconds(const CostModel& m, size_t bytes, int n, size_t) {
  if (n <= 1) return 0.0;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const double x = static_cast<double>(bytes);
  // Folding in and out: the whole buffer each way (reduced on the way in).
  double t = p == n ? 0.0 : stepSeconds(m, x, 1) + stepSeconds(m, x, 0);
  for (int part = 2; part <= p; part *= 2) {
    t += stepSeconds(m, x / part, 1) + stepSeconds(m, x / part, 0);  // halving, doubling
  }
  return t;
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
