#include "algo/registry.h"

#include "algo/model.h"
#include "util/error.h"

namespace mccl::algo {

// Entry points, one per algorithm file.
Task allreduceRing(OpContext& ctx, AllreduceOptions o);
Task allreduceRecursiveDoubling(OpContext& ctx, AllreduceOptions o);
Task allreduceDirect(OpContext& ctx, AllreduceOptions o);
Task allreduceBruck(OpContext& ctx, AllreduceOptions o);
Task allreduceRabenseifner(OpContext& ctx, AllreduceOptions o);
Task allreduceRecursiveMultiplying(OpContext& ctx, AllreduceOptions o);
Task allreduceTorus(OpContext& ctx, AllreduceOptions o);
Task broadcastBinomial(OpContext& ctx, BroadcastOptions o);
Task broadcastChain(OpContext& ctx, BroadcastOptions o);
Task reduceBinomial(OpContext& ctx, ReduceOptions o);
Task reduceChain(OpContext& ctx, ReduceOptions o);
Task allgatherRing(OpContext& ctx, AllgatherOptions o);
Task allgatherDirect(OpContext& ctx, AllgatherOptions o);
Task reduceScatterRing(OpContext& ctx, ReduceScatterOptions o);
Task reduceScatterDirect(OpContext& ctx, ReduceScatterOptions o);
Task gatherDirect(OpContext& ctx, GatherOptions o);
Task scatterDirect(OpContext& ctx, ScatterOptions o);
Task alltoallPairwise(OpContext& ctx, AlltoallOptions o);
Task barrierDissemination(OpContext& ctx);
Task allreduceRingWire(OpContext& ctx, AllreduceOptions o);
Task allreducePairwiseWire(OpContext& ctx, AllreduceOptions o);
Task allreducePairwiseInt8(OpContext& ctx, AllreduceOptions o);
Task reduceScatterRingWire(OpContext& ctx, ReduceScatterOptions o);
Task reduceScatterPairwiseWire(OpContext& ctx, ReduceScatterOptions o);
Task reduceScatterPairwiseInt8(OpContext& ctx, ReduceScatterOptions o);

namespace {

bool powerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }
bool rabenseifnerOn(int n, size_t share, size_t small) { return powerOfTwo(n) && share <= small; }
// On powers of two Rabenseifner's takes fewer steps with the same bytes at
// small shares; the torus is priced near it there, and rounding could break
// the tie.
bool torusOn(int n, size_t share, size_t small) {
  return hasTorusGrid(n) && (share > small || !powerOfTwo(n));
}

// The wires (MCCL_WIRE_DTYPE, MCCL_WIRE_REDUCE): a 16-bit dtype by ring
// (partial sums rounded at every hop: the fastest) or by pairwise exchange
// (each input rounded once: an error that does not grow with the group; auto
// takes it from 8 ranks); int8 by pairwise exchange whatever MCCL_WIRE_REDUCE
// says (a partial sum is never encoded).
bool sixteenBit(kernels::WireDtype w) {
  return w == kernels::WireDtype::kBf16 || w == kernels::WireDtype::kFp16;
}
bool pairwiseReduce(const std::string& reduce, int n) {
  return reduce == "pairwise" || (reduce == "auto" && n >= 8);
}
bool ringWireFor(kernels::WireDtype w, const std::string& reduce, int n) {
  return sixteenBit(w) && !pairwiseReduce(reduce, n);
}
bool pairwiseWireFor(kernels::WireDtype w, const std::string& reduce, int n) {
  return sixteenBit(w) && pairwiseReduce(reduce, n);
}
bool int8WireFor(kernels::WireDtype w, const std::string&, int) { return w == kernels::WireDtype::kInt8; }

const char* nameOf(Algo id) {
  for (const auto& a : algorithms()) {
    if (a.id == id) return a.name;
  }
  return nullptr;
}

}  // namespace

const std::vector<Algorithm>& algorithms() {
  static const std::vector<Algorithm> table = [] {
    std::vector<Algorithm> t = {
        {Algo::kRing, OpKind::kAllreduce, "ring", allreduceRing, allreduceRingSeconds},
        {Algo::kRecursiveDoubling, OpKind::kAllreduce, "recursive_doubling",
         allreduceRecursiveDoubling, allreduceRecursiveDoublingSeconds},
        {Algo::kDirect, OpKind::kAllreduce, "direct", allreduceDirect, allreduceDirectSeconds, true},
        {Algo::kBruck, OpKind::kAllreduce, "bruck", allreduceBruck, allreduceBruckSeconds, true},
        {Algo::kRecursiveMultiplying, OpKind::kAllreduce, "recursive_multiplying",
         allreduceRecursiveMultiplying, allreduceRecursiveMultiplyingSeconds, true},
        {Algo::kRabenseifner, OpKind::kAllreduce, "rabenseifner", allreduceRabenseifner,
         allreduceRabenseifnerSeconds, false, rabenseifnerOn},
        {Algo::kTorus, OpKind::kAllreduce, "torus", allreduceTorus, allreduceTorusSeconds, false,
         torusOn, 1.1},
        {Algo::kBinomial, OpKind::kBroadcast, "binomial", broadcastBinomial, broadcastBinomialSeconds},
        {Algo::kChain, OpKind::kBroadcast, "chain", broadcastChain, broadcastChainSeconds},
        {Algo::kBinomial, OpKind::kReduce, "binomial", reduceBinomial, reduceBinomialSeconds},
        {Algo::kChain, OpKind::kReduce, "chain", reduceChain, reduceChainSeconds},
        {Algo::kRing, OpKind::kAllgather, "ring", allgatherRing, allgatherRingSeconds},
        {Algo::kDirect, OpKind::kAllgather, "direct", allgatherDirect, exchangeSeconds, true},
        {Algo::kRing, OpKind::kReduceScatter, "ring", reduceScatterRing, reduceScatterRingSeconds},
        {Algo::kDirect, OpKind::kReduceScatter, "direct", reduceScatterDirect,
         reduceExchangeSeconds, true},
        {Algo::kDirect, OpKind::kGather, "direct", gatherDirect, exchangeSeconds},
        {Algo::kDirect, OpKind::kScatter, "direct", scatterDirect, exchangeSeconds},
        {Algo::kPairwise, OpKind::kAlltoall, "pairwise", alltoallPairwise, exchangeSeconds},
        {Algo::kDissemination, OpKind::kBarrier, "dissemination", barrierDissemination,
         disseminationSeconds},
        // The wires: taken by wireFor from MCCL_WIRE_DTYPE and MCCL_WIRE_REDUCE.
        {Algo::kRingWire, OpKind::kAllreduce, "ring_wire", allreduceRingWire, allreduceWire16Seconds,
         false, nullptr, 1.0, ringWireFor},
        {Algo::kPairwiseWire, OpKind::kAllreduce, "pairwise_wire", allreducePairwiseWire,
         allreduceWire16Seconds, false, nullptr, 1.0, pairwiseWireFor},
        {Algo::kPairwiseInt8, OpKind::kAllreduce, "pairwise_int8", allreducePairwiseInt8,
         allreduceInt8Seconds, false, nullptr, 1.0, int8WireFor},
        {Algo::kRingWire, OpKind::kReduceScatter, "ring_wire", reduceScatterRingWire,
         reduceScatterWire16Seconds, false, nullptr, 1.0, ringWireFor},
        {Algo::kPairwiseWire, OpKind::kReduceScatter, "pairwise_wire", reduceScatterPairwiseWire,
         reduceScatterWire16Seconds, false, nullptr, 1.0, pairwiseWireFor},
        {Algo::kPairwiseInt8, OpKind::kReduceScatter, "pairwise_int8", reduceScatterPairwiseInt8,
         reduceScatterInt8Seconds, false, nullptr, 1.0, int8WireFor},
    };
    return t;
  }();
  static const bool named = (setAlgoNamer(nameOf), true);
  (void)named;
  return table;
}

const Algorithm& algorithm(OpKind op, Algo id) {
  for (const auto& a : algorithms()) {
    if (a.op == op && a.id == id) return a;
  }
  throwError(ErrorKind::kInternal, "no algorithm ", static_cast<int>(id), " for ", opKindName(op));
}

const Algorithm* find(OpKind op, const std::string& name) {
  for (const auto& a : algorithms()) {
    if (a.op == op && name == a.name) return &a;
  }
  return nullptr;
}

std::string algorithmsFor(OpKind op) {
  std::string s;
  for (const auto& a : algorithms()) {
    if (a.op == op && !a.isWire()) s += strCat(s.empty() ? "" : ", ", a.name);
  }
  return s;
}

bool isCollective(const std::string& name) {
  for (const auto& a : algorithms()) {
    if (name == opKindName(a.op)) return true;
  }
  return false;
}

double predictSeconds(const CostModel& m, OpKind op, Algo algo, size_t bytes, int n,
                      size_t chunkBytes) {
  return algorithm(op, algo).cost(m, bytes, n, chunkBytes);
}

}  // namespace mccl::algo
