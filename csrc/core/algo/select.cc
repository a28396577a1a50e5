#include "algo/select.h"

#include <vector>

#include "algo/model.h"
#include "util/check.h"

namespace mccl::algo {
namespace {

struct Candidate {
  OpKind op;
  std::vector<Algo> all;  // the first wins ties
};

const std::vector<Candidate>& table() {
  static const std::vector<Candidate> t = {
      {OpKind::kAllreduce, {Algo::kRing, Algo::kRecursiveDoubling, Algo::kDirect}},
      {OpKind::kBroadcast, {Algo::kBinomial, Algo::kChain}},
      {OpKind::kReduce, {Algo::kBinomial, Algo::kChain}},
      {OpKind::kAllgather, {Algo::kRing, Algo::kDirect}},
      {OpKind::kReduceScatter, {Algo::kRing, Algo::kDirect}},
      {OpKind::kGather, {Algo::kDirect}},
      {OpKind::kScatter, {Algo::kDirect}},
      {OpKind::kAlltoall, {Algo::kPairwise}},
      {OpKind::kBarrier, {Algo::kDissemination}},
  };
  return t;
}

const Candidate& entry(OpKind op) {
  for (const auto& c : table()) {
    if (c.op == op) return c;
  }
  throwError(ErrorKind::kInternal, "no algorithms for ", opKindName(op));
}

// The algorithm MCCL_ALGO forces for `op`, or kNone.
Algo forced(const std::string& spec, OpKind op) {
  size_t start = 0;
  while (start < spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    MCCL_USAGE_CHECK(eq != std::string::npos, "MCCL_ALGO entry '", item,
                     "' is not collective=algorithm");
    std::string coll = item.substr(0, eq), name = item.substr(eq + 1);
    bool known = false;
    for (const auto& c : table()) known = known || coll == opKindName(c.op);
    MCCL_USAGE_CHECK(known, "MCCL_ALGO names unknown collective '", coll, "'");
    if (coll != opKindName(op)) continue;
    for (Algo a : entry(op).all) {
      if (name == algoName(a)) return a;
    }
    throwError(ErrorKind::kUsage, "MCCL_ALGO: '", name, "' is not an algorithm for ", coll,
               " (choose from ", algorithmsFor(op), ")");
  }
  return Algo::kNone;
}

}  // namespace

std::string algorithmsFor(OpKind op) {
  std::string s;
  for (Algo a : entry(op).all) s += strCat(s.empty() ? "" : ", ", algoName(a));
  return s;
}

Algo choose(const CommConfig& cfg, const CostModel& model, OpKind op, size_t bytes) {
  Algo f = forced(cfg.algo, op);
  if (f != Algo::kNone) return f;
  const Candidate& c = entry(op);
  Algo best = Algo::kNone;
  double bestCost = 0;
  for (Algo a : c.all) {
    // Direct exchanges need scratch for every peer's data and converge many
    // flows on each receiver: they are for small collectives only.
    if (a == Algo::kDirect && c.all.size() > 1 && bytes > cfg.smallBytes) continue;
    double cost = predictSeconds(model, op, a, bytes, cfg.size, cfg.chunkBytes);
    if (best == Algo::kNone || cost < bestCost) {
      best = a;
      bestCost = cost;
    }
  }
  return best;
}

}  // namespace mccl::algo
