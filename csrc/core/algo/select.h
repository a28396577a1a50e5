// Algorithm choice per collective: MCCL_ALGO when it names one, else by
// message size against MCCL_SMALL_BYTES (latency algorithms below it,
// bandwidth algorithms above).
//
// MCCL_ALGO syntax: comma-separated collective=algorithm pairs, e.g.
// "allreduce=ring,broadcast=binomial". Every rank must choose alike: the
// choice travels in frame headers and a difference is reported as a
// mismatch.
#pragma once

#include <cstddef>
#include <string>

#include "comm/config.h"
#include "comm/signature.h"

namespace mccl::algo {

// Returns the algorithm for `op` moving `bytes` (per-rank payload) among `n`
// ranks. Throws a usage error for an unknown or inapplicable MCCL_ALGO entry.
Algo choose(const CommConfig& cfg, OpKind op, size_t bytes);

// The algorithms MCCL implements for `op` (for docs and error messages).
std::string algorithmsFor(OpKind op);

}  // namespace mccl::algo
