// The one table of algorithms (in the manner of NCCL's algorithm/protocol
// tables): for each, its wire id, its name (MCCL_ALGO, docs, errors), the
// collective it runs, its entry point and its predicted cost. The selector
// (select.h) chooses from it, the collectives (collectives.cc) run the
// chosen entry, and the cost model's Python view predicts through it.
//
// Adding an algorithm: its file (algo/<collective>_<algorithm>.cc), its wire
// id in comm/signature.h (ids travel in frame headers: append only), and
// one row in registry.cc. Nothing else names algorithms.
#pragma once

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "algo/collectives.h"
#include "comm/cost_model.h"
#include "comm/signature.h"
#include "comm/task.h"
#include "reduce/wire.h"

namespace mccl {
class OpContext;
}

namespace mccl::algo {

// An entry point: a coroutine that takes its options by value (it outlives
// the call that starts it). The options type says which collective it runs.
template <typename O>
using EntryOf = Task (*)(OpContext&, O);
using BarrierEntry = Task (*)(OpContext&);
using Entry = std::variant<EntryOf<AllreduceOptions>, EntryOf<BroadcastOptions>,
                           EntryOf<ReduceOptions>, EntryOf<AllgatherOptions>,
                           EntryOf<ReduceScatterOptions>, EntryOf<GatherOptions>,
                           EntryOf<ScatterOptions>, EntryOf<AlltoallOptions>, BarrierEntry>;

struct Algorithm {
  Algo id;
  OpKind op;
  const char* name;
  Entry entry;
  // Predicted seconds under the model (algo/model.h): `bytes` is the buffer
  // of allreduce, broadcast and reduce, the per-rank block of allgather and
  // reduce_scatter; `chunkBytes` the pipeline chunk.
  double (*cost)(const CostModel& m, size_t bytes, int n, size_t chunkBytes);
  // A candidate only up to MCCL_SMALL_BYTES when the collective has others:
  // direct exchanges need scratch for every peer and converge n-1 flows on
  // each receiver, which the model does not price.
  bool smallOnly = false;
  // When the collective has others, whether this one is a candidate on a
  // group of n ranks whose share of the buffer (bytes / n) is `share`, with
  // MCCL_SMALL_BYTES `small`. Rabenseifner's: on powers of two while the
  // share is small (elsewhere a fold moves the whole buffer twice more,
  // which only a model tuned on the fleet weighs right; beyond, the chunked
  // pipelines of the ring and the torus, measured at the links' rate, are
  // the choice). The torus: on grids, at small shares only where the group
  // is not a power of two (Rabenseifner's takes fewer steps there), at
  // larger ones on every grid, where the model charges its pipeline's tail
  // against the ring's 2(n-1) steps. Null: always a candidate.
  bool (*candidateOn)(int n, size_t share, size_t small) = nullptr;
  // At shares above MCCL_SMALL_BYTES the selector weighs this one's
  // predicted time by this factor (what the model predicts is unchanged).
  // The torus's is 1.1: there it replaces the ring only where the model
  // puts it at least 9 % ahead. Its row and column flows leave every host
  // at once, which the model does not price: on the H200 box's 1 Gbit/s lab
  // (CUBIC) it ran 64 MiB (4 MiB pieces) 0.7 % behind the ring at 24 hosts
  // and 6.7-6.9 % behind at 48 (rounds up to 16 %; the ring's within 0.1 %
  // of each other), where the lab's fitted model put it 1 % ahead. At
  // smaller shares, where it was measured 1.9x faster than the ring (64 KiB
  // on 24 hosts, 256 KiB on 48), no margin (docs/benchmarks.md, "Scale").
  double largeShareMargin = 1.0;
  // Wire algorithms: float32 (and float64) SUM/AVG sent in the group's
  // MCCL_WIRE_DTYPE instead of their own dtype (the entry reads it from the
  // group's config; `cost` prices float32 buffers). Whether this one is the
  // algorithm for wire dtype `w` under MCCL_WIRE_REDUCE `reduce` on n ranks;
  // null for the others. Wire rows are chosen by the wire settings (select.h,
  // wireAlgorithm), never by the cost model or MCCL_ALGO.
  bool (*wireFor)(kernels::WireDtype w, const std::string& reduce, int n) = nullptr;
  bool isWire() const { return wireFor != nullptr; }
};

// Every algorithm; per collective in order of preference (the first wins
// ties in the selector).
const std::vector<Algorithm>& algorithms();
// The row of algorithm `id` for collective `op`; throws an internal error
// when there is none.
const Algorithm& algorithm(OpKind op, Algo id);
// The row for collective `op` named `name`, or null (wire rows included:
// MCCL_ALGO refuses those itself).
const Algorithm* find(OpKind op, const std::string& name);
// "ring, recursive_doubling, direct": the algorithms of `op` that MCCL_ALGO
// may name (not the wire rows).
std::string algorithmsFor(OpKind op);
// Whether `name` is a collective that has algorithms ("allreduce", ...).
bool isCollective(const std::string& name);

}  // namespace mccl::algo
