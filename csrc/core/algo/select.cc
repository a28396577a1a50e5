#include "algo/select.h"

#include <algorithm>

#include "algo/common.h"
#include "algo/model.h"
#include "algo/registry.h"
#include "util/check.h"

namespace mccl::algo {
namespace {

// The algorithm MCCL_ALGO forces for `op`, or null.
const Algorithm* forced(const std::string& spec, OpKind op) {
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
    MCCL_USAGE_CHECK(isCollective(coll), "MCCL_ALGO names unknown collective '", coll, "'");
    if (coll != opKindName(op)) continue;
    if (const Algorithm* a = find(op, name); a != nullptr && !a->isWire()) return a;
    throwError(ErrorKind::kUsage, "MCCL_ALGO: '", name, "' is not an algorithm for ", coll,
               " (choose from ", algorithmsFor(op), ")");
  }
  return nullptr;
}

}  // namespace

const Algorithm& chooseAlgorithm(const CommConfig& cfg, const CostModel& model, OpKind op,
                                 size_t bytes) {
  if (const Algorithm* f = forced(cfg.algo, op)) return *f;
  size_t candidates = 0;
  for (const auto& a : algorithms()) candidates += a.op == op && !a.isWire() ? 1 : 0;
  const Algorithm* best = nullptr;
  double bestCost = 0;
  const size_t share = bytes / static_cast<size_t>(std::max(1, cfg.size));
  for (const auto& a : algorithms()) {
    if (a.op != op || a.isWire() || (a.smallOnly && candidates > 1 && bytes > cfg.smallBytes)) continue;
    if (a.candidateOn != nullptr && candidates > 1 && !a.candidateOn(cfg.size, share, cfg.smallBytes)) {
      continue;
    }
    double cost = a.cost(model, bytes, cfg.size, cfg.chunkBytes);
    if (share > cfg.smallBytes) cost *= a.largeShareMargin;
    if (best == nullptr || cost < bestCost) {
      best = &a;
      bestCost = cost;
    }
  }
  if (best == nullptr) throwError(ErrorKind::kInternal, "no algorithms for ", opKindName(op));
  return *best;
}

const Algorithm* wireAlgorithm(const CommConfig& cfg, OpKind op, DataType dtype, ReduceOp rop,
                               size_t bytes) {
  const kernels::WireDtype w = wireDtypeOf(cfg);
  if (w == kernels::WireDtype::kFp32 || (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) ||
      (rop != ReduceOp::kSum && rop != ReduceOp::kAvg) || bytes < cfg.wireDtypeMinBytes || cfg.size <= 1 ||
      forcedFor(cfg, op)) {
    return nullptr;
  }
  for (const auto& a : algorithms()) {
    if (a.op == op && a.isWire() && a.wireFor(w, cfg.wireReduce, cfg.size)) return &a;
  }
  return nullptr;
}

std::string chosenName(const CommConfig& cfg, const CostModel& model, OpKind op, size_t bytes) {
  const Algorithm& a = chooseAlgorithm(cfg, model, op, bytes);
  if (op == OpKind::kAllreduce && a.id == Algo::kBruck) {
    return strCat(a.name, " (radix ", bruckRadix(model, bytes, cfg.size), ")");
  }
  if (op == OpKind::kAllreduce && a.id == Algo::kRecursiveDoubling && cfg.size > 1) {
    // Named when it folds into fewer leaders than the classic fold's.
    const int leaders = rdLeaders(model, bytes, cfg.size);
    if (leaders < largestPowerOfTwo(cfg.size)) {
      return strCat(a.name, " (", leaders, leaders == 1 ? " leader)" : " leaders)");
    }
  }
  return a.name;
}

bool forcedFor(const CommConfig& cfg, OpKind op) { return forced(cfg.algo, op) != nullptr; }

Algo choose(const CommConfig& cfg, const CostModel& model, OpKind op, size_t bytes) {
  return chooseAlgorithm(cfg, model, op, bytes).id;
}

}  // namespace mccl::algo
