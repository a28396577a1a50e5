// Predicted time of each algorithm under the cost model (comm/cost_model.h):
// per message, latency α plus the CPU overhead o of sending and of receiving
// it; per byte, β on the wire and γ to reduce. The selector picks the
// cheapest; docs/architecture.md lists the formulas.
#pragma once

#include <cstddef>

#include "comm/cost_model.h"
#include "comm/signature.h"

namespace mccl::algo {

// Seconds for `algo` running `op` over `n` ranks. `bytes` is the buffer of
// allreduce, broadcast and reduce, and the per-rank block of allgather and
// reduce_scatter. `chunkBytes` is the pipeline chunk of chain algorithms.
double predictSeconds(const CostModel& m, OpKind op, Algo algo, size_t bytes, int n,
                      size_t chunkBytes);

}  // namespace mccl::algo
