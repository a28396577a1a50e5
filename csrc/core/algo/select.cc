#include "algo/select.h"

#include <vector>

#include "util/check.h"

namespace mccl::algo {
namespace {

struct Candidate {
  OpKind op;
  Algo small, large;
  std::vector<Algo> all;
};

const std::vector<Candidate>& table() {
  static const std::vector<Candidate> t = {
      {OpKind::kAllreduce, Algo::kRecursiveDoubling, Algo::kRing,
       {Algo::kRing, Algo::kRecursiveDoubling, Algo::kDirect}},
      {OpKind::kBroadcast, Algo::kBinomial, Algo::kChain, {Algo::kBinomial, Algo::kChain}},
      {OpKind::kReduce, Algo::kBinomial, Algo::kChain, {Algo::kBinomial, Algo::kChain}},
      {OpKind::kAllgather, Algo::kDirect, Algo::kRing, {Algo::kRing, Algo::kDirect}},
      {OpKind::kReduceScatter, Algo::kDirect, Algo::kRing, {Algo::kRing, Algo::kDirect}},
      {OpKind::kGather, Algo::kDirect, Algo::kDirect, {Algo::kDirect}},
      {OpKind::kScatter, Algo::kDirect, Algo::kDirect, {Algo::kDirect}},
      {OpKind::kAlltoall, Algo::kPairwise, Algo::kPairwise, {Algo::kPairwise}},
      {OpKind::kBarrier, Algo::kDissemination, Algo::kDissemination, {Algo::kDissemination}},
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

Algo choose(const CommConfig& cfg, OpKind op, size_t bytes) {
  Algo f = forced(cfg.algo, op);
  if (f != Algo::kNone) return f;
  const Candidate& c = entry(op);
  return bytes <= cfg.smallBytes ? c.small : c.large;
}

}  // namespace mccl::algo
