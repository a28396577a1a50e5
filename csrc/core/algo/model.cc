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

double predictSeconds(const CostModel& m, OpKind op, Algo algo, size_t bytes, int n,
                      size_t chunkBytes) {
  if (n <= 1) return 0.0;
  const double a = m.alphaUs * 1e-6, o = m.overheadUs * 1e-6;
  const double b = m.betaNsPerByte * 1e-9, g = m.gammaNsPerByte * 1e-9;
  auto step = [&](double xs, double reduce) { return stepSeconds(m, xs, reduce); };
  // k messages to or from different peers at once (direct algorithms).
  auto fan = [&](double k, double xs, double reduce) {
    return a + std::max(2 * k * o, k * xs * b) + reduce * k * xs * g;
  };
  const double x = static_cast<double>(bytes), nn = n;
  const double logn = std::ceil(std::log2(nn));
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const double rounds = std::log2(static_cast<double>(p)) + (p == n ? 0 : 2);
  switch (op) {
    case OpKind::kAllreduce:
      if (algo == Algo::kRing) return (nn - 1) * (step(x / nn, 1) + step(x / nn, 0));
      if (algo == Algo::kDirect) return fan(nn - 1, x, 1);
      return rounds * step(x, 1);  // recursive doubling
    case OpKind::kBroadcast:
      if (algo == Algo::kChain) return chainSeconds(m, op, x, n, chainChunks(m, op, bytes, 1, n, chunkBytes));
      return binomialSeconds(m, op, x, n);
    case OpKind::kReduce:
      if (algo == Algo::kChain) return chainSeconds(m, op, x, n, chainChunks(m, op, bytes, 1, n, chunkBytes));
      return binomialSeconds(m, op, x, n);
    case OpKind::kAllgather:
      if (algo == Algo::kRing) return (nn - 1) * step(x, 0);
      return fan(nn - 1, x, 0);  // direct
    case OpKind::kReduceScatter:
      if (algo == Algo::kRing) return (nn - 1) * step(x, 1);
      return fan(nn - 1, x, 1);
    case OpKind::kGather:
    case OpKind::kScatter:
    case OpKind::kAlltoall:
      return fan(nn - 1, x, 0);
    case OpKind::kBarrier:
      return logn * step(0, 0);
    default:
      return 0.0;
  }
}

}  // namespace mccl::algo
