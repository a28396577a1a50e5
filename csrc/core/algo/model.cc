#include "algo/model.h"

#include <algorithm>
#include <cmath>

namespace mccl::algo {

double predictSeconds(const CostModel& m, OpKind op, Algo algo, size_t bytes, int n,
                      size_t chunkBytes) {
  if (n <= 1) return 0.0;
  const double a = m.alphaUs * 1e-6, o = m.overheadUs * 1e-6;
  const double b = m.betaNsPerByte * 1e-9, g = m.gammaNsPerByte * 1e-9;
  const double msg = a + 2 * o;  // one message: latency, send and receive overhead
  const double x = static_cast<double>(bytes), nn = n;
  const double logn = std::ceil(std::log2(nn));
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const double rounds = std::log2(static_cast<double>(p)) + (p == n ? 0 : 2);
  const double nch = std::max(1.0, std::ceil(x / static_cast<double>(std::max<size_t>(1, chunkBytes))));
  const double chunk = x / nch;
  switch (op) {
    case OpKind::kAllreduce:
      if (algo == Algo::kRing) return 2 * (nn - 1) * msg + 2 * (nn - 1) / nn * x * b + (nn - 1) / nn * x * g;
      if (algo == Algo::kDirect) return a + 2 * (nn - 1) * o + (nn - 1) * x * (b + g);
      return rounds * (msg + x * b + x * g);  // recursive doubling
    case OpKind::kBroadcast:
      if (algo == Algo::kChain) return (nn - 2 + nch) * (msg + chunk * b);
      return logn * (msg + x * b);  // binomial
    case OpKind::kReduce:
      if (algo == Algo::kChain) return (nn - 2 + nch) * (msg + chunk * (b + g));
      return logn * (msg + x * (b + g));
    case OpKind::kAllgather:
      if (algo == Algo::kRing) return (nn - 1) * (msg + x * b);
      return a + 2 * (nn - 1) * o + (nn - 1) * x * b;  // direct
    case OpKind::kReduceScatter:
      if (algo == Algo::kRing) return (nn - 1) * (msg + x * (b + g));
      return a + 2 * (nn - 1) * o + (nn - 1) * x * (b + g);
    case OpKind::kGather:
    case OpKind::kScatter:
      return a + (nn - 1) * (2 * o + x * b);
    case OpKind::kAlltoall:
      return a + (nn - 1) * (2 * o + x * b);
    case OpKind::kBarrier:
      return logn * msg;
    default:
      return 0.0;
  }
}

}  // namespace mccl::algo
