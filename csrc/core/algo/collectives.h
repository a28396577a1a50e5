// The collective operations of the MCCL core: an options struct plus a
// function each (in the manner of Gloo's allreduce.h).
//
// Every function validates its options on the calling thread and throws a
// usage error (mccl::Error, kUsage) naming the op, this rank and the sizes
// before any traffic; otherwise it enqueues the op on the communicator and
// returns a Work at once. All ranks of the group must call the same
// collectives in the same order with matching signatures (dtype, count,
// reduce op, root); a mismatch fails the op on every rank with an error that
// names both sides.
//
// Memory: buffers are used in place (zero copy) and must stay valid, and
// inputs unmodified, until the Work completes. Counts are in elements of
// `dtype`. Timeouts <= 0 mean the communicator's default; the deadline runs
// from when the op starts executing, not from when it was queued.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/work.h"
#include "util/dtype.h"

namespace mccl {

using Timeout = std::chrono::milliseconds;

// Why `root` cannot be the root of a collective on `size` ranks ("root rank
// 7 is outside the group of 2 ranks"); empty when it can. The one wording of
// this refusal, for the core's checks and the adapters' (which validate a
// whole call before they submit any part of it).
std::string rootRefusal(int size, int64_t root);

// In place: `buf` holds this rank's input and receives the result.
struct AllreduceOptions {
  void* buf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double premulFactor = 1.0;  // PREMUL_SUM: each input is scaled by this first
  Timeout timeout{0};
};
std::shared_ptr<Work> allreduce(Communicator& comm, const AllreduceOptions& o);

// What `comm` runs for one all-reduce, broadcast or reduce (`op`) of `count`
// elements of `dtype` reduced with `rop`: the algorithm its agreed model and
// settings choose ("torus", "bruck (radix 3)"), or the wire algorithm that
// replaces it, with the 16-bit wire's dtype ("ring_wire (bf16)",
// "pairwise_int8"). For benchmarks and tools; the same decision the calls
// above make, and the table's names, which the trace and errors show.
std::string algorithmFor(const Communicator& comm, OpKind op, DataType dtype, ReduceOp rop, size_t count);

// `buf` is the root's input and every other rank's output.
struct BroadcastOptions {
  void* buf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  Timeout timeout{0};
};
std::shared_ptr<Work> broadcast(Communicator& comm, const BroadcastOptions& o);

// `buf` is every rank's input; the root's `buf` receives the result. Other
// ranks' buffers are not modified.
struct ReduceOptions {
  void* buf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double premulFactor = 1.0;
  int root = 0;
  Timeout timeout{0};
};
std::shared_ptr<Work> reduce(Communicator& comm, const ReduceOptions& o);

// out[i] (size() pointers, `count` elements each) receives rank i's input.
// `in` may equal out[rank].
struct AllgatherOptions {
  const void* in = nullptr;
  std::vector<void*> out;
  size_t count = 0;  // per rank
  DataType dtype = DataType::kFloat32;
  Timeout timeout{0};
};
std::shared_ptr<Work> allgather(Communicator& comm, const AllgatherOptions& o);

// in[i] (size() pointers, `count` elements each) is this rank's contribution
// to rank i's block; `out` receives the reduction of every rank's in[rank].
// `out` must not overlap any input block (refused: the algorithms write it
// before they have read all of them).
struct ReduceScatterOptions {
  std::vector<const void*> in;
  void* out = nullptr;
  size_t count = 0;  // per rank
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double premulFactor = 1.0;
  Timeout timeout{0};
};
std::shared_ptr<Work> reduceScatter(Communicator& comm, const ReduceScatterOptions& o);

// The root's out[i] receives rank i's `in`; `out` is ignored elsewhere.
struct GatherOptions {
  const void* in = nullptr;
  std::vector<void*> out;
  size_t count = 0;  // per rank
  DataType dtype = DataType::kFloat32;
  int root = 0;
  Timeout timeout{0};
};
std::shared_ptr<Work> gather(Communicator& comm, const GatherOptions& o);

// Rank i's `out` receives the root's in[i]; `in` is ignored elsewhere.
struct ScatterOptions {
  std::vector<const void*> in;
  void* out = nullptr;
  size_t count = 0;  // per rank
  DataType dtype = DataType::kFloat32;
  int root = 0;
  Timeout timeout{0};
};
std::shared_ptr<Work> scatter(Communicator& comm, const ScatterOptions& o);

// in[i] (inCounts[i] elements) goes to rank i; out[i] (outCounts[i]
// elements) receives what rank i sends here. Counts may differ per pair
// (all-to-all-v); rank i's inCounts[j] must equal rank j's outCounts[i].
struct AlltoallOptions {
  std::vector<const void*> in;
  std::vector<size_t> inCounts;
  std::vector<void*> out;
  std::vector<size_t> outCounts;
  DataType dtype = DataType::kFloat32;
  Timeout timeout{0};
};
std::shared_ptr<Work> alltoall(Communicator& comm, const AlltoallOptions& o);

std::shared_ptr<Work> barrier(Communicator& comm, Timeout timeout = Timeout{0});

// Point-to-point, ordered per (peer, tag). Not collective: no sequence number.
// `timeout` <= 0: the group's.
std::shared_ptr<Work> send(Communicator& comm, int peer, uint32_t tag, const void* buf,
                           size_t count, DataType dtype, Timeout timeout = Timeout{0});
// peer == Communicator::kAnySource receives from any rank (Work::sourceRank).
std::shared_ptr<Work> recv(Communicator& comm, int peer, uint32_t tag, void* buf, size_t count,
                           DataType dtype, Timeout timeout = Timeout{0});

}  // namespace mccl
