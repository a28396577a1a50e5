// Algorithm choice per collective: MCCL_ALGO when it names one, else the
// algorithm the cost model (algo/model.h) predicts to be fastest. Direct
// exchanges (every rank to every rank) are candidates only up to
// MCCL_SMALL_BYTES: they need scratch for every peer and converge n-1 flows
// on each receiver, which the model does not price.
//
// MCCL_ALGO syntax: comma-separated collective=algorithm pairs, e.g.
// "allreduce=ring,broadcast=binomial". Every rank must choose alike: the
// choice travels in frame headers and a difference is reported as a
// mismatch.
#pragma once

#include <cstddef>
#include <string>

#include "comm/config.h"
#include "comm/cost_model.h"
#include "comm/signature.h"

namespace mccl::algo {

// Returns the algorithm for `op` moving `bytes` (see predictSeconds) among
// cfg.size ranks. Throws a usage error for an unknown or inapplicable
// MCCL_ALGO entry.
Algo choose(const CommConfig& cfg, const CostModel& model, OpKind op, size_t bytes);

// The algorithms MCCL implements for `op` (for docs and error messages).
std::string algorithmsFor(OpKind op);

}  // namespace mccl::algo
