// Algorithm choice per collective: MCCL_ALGO when it names one, else the
// algorithm the cost model (algo/model.h) predicts to be fastest among the
// collective's rows of the algorithm table (algo/registry.h). Rows marked
// smallOnly (direct exchanges) are candidates only up to MCCL_SMALL_BYTES;
// wire rows are never candidates (wireAlgorithm chooses those).
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
#include "util/dtype.h"

namespace mccl::algo {

struct Algorithm;

// The algorithm (a row of registry.h's table) for `op` moving `bytes` (see
// predictSeconds) among cfg.size ranks. Throws a usage error for an unknown
// or inapplicable MCCL_ALGO entry.
const Algorithm& chooseAlgorithm(const CommConfig& cfg, const CostModel& model, OpKind op,
                                 size_t bytes);
// The wire algorithm (a row of the table with wireFor) that replaces the
// chosen one for `op` on `bytes` input bytes of `dtype` reduced by `rop`, or
// null. MCCL_WIRE_DTYPE applies to float32 and float64 SUM/AVG all-reduce
// and reduce-scatter of at least MCCL_WIRE_DTYPE_MIN_BYTES on more than one
// rank, unless MCCL_ALGO forces an algorithm for the collective; which row
// serves it, the row says from MCCL_WIRE_DTYPE and MCCL_WIRE_REDUCE. Every
// rank decides alike: those settings are agreed at bootstrap.
const Algorithm* wireAlgorithm(const CommConfig& cfg, OpKind op, DataType dtype, ReduceOp rop,
                               size_t bytes);
// Its name as tools show it: the table's name, with the radix for Bruck's
// all-reduce ("bruck (radix 3)").
std::string chosenName(const CommConfig& cfg, const CostModel& model, OpKind op, size_t bytes);
// Its id.
Algo choose(const CommConfig& cfg, const CostModel& model, OpKind op, size_t bytes);
// Whether MCCL_ALGO (cfg.algo) forces an algorithm for `op`.
bool forcedFor(const CommConfig& cfg, OpKind op);

}  // namespace mccl::algo
