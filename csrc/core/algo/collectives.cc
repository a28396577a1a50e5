// Entry points: validate on the caller's thread, pick the algorithm from the
// table (registry.h), enqueue its entry point.
#include "algo/collectives.h"

#include <cmath>
#include <limits>

#include "algo/common.h"
#include "algo/registry.h"
#include "algo/select.h"
#include "comm/op_context.h"
#include "util/check.h"

namespace mccl {
namespace {

using algo::Algorithm;
using algo::chooseAlgorithm;
using algo::EntryOf;

template <typename... Args>
[[noreturn]] void usage(const Communicator& comm, const char* op, Args&&... args) {
  throwError(ErrorKind::kUsage, comm.selfName(), ": ", op, ": ", std::forward<Args>(args)...);
}

size_t bytesOf(const Communicator& comm, const char* op, size_t count, DataType dtype) {
  if (!isValidDataType(static_cast<uint8_t>(dtype))) usage(comm, op, "invalid dtype");
  size_t es = dtypeSize(dtype);
  if (count > std::numeric_limits<size_t>::max() / es / 4) {
    usage(comm, op, "count ", count, " is too large");
  }
  return count * es;
}

void checkReduce(const Communicator& comm, const char* op, DataType dtype, ReduceOp rop,
                 double factor) {
  if (!isValidReduceOp(static_cast<uint8_t>(rop))) usage(comm, op, "invalid reduce op");
  if (std::string why = reduceRefusal(dtype, rop); !why.empty()) usage(comm, op, why);
  if (rop == ReduceOp::kPreMulSum && !std::isfinite(factor)) {
    usage(comm, op, "PREMUL_SUM factor ", factor, " is not finite");
  }
}

template <typename P>
void checkList(const Communicator& comm, const char* op, const char* what,
               const std::vector<P>& list, size_t bytes) {
  if (list.size() != static_cast<size_t>(comm.size())) {
    usage(comm, op, what, " has ", list.size(), " entries but the group has ", comm.size(),
          " ranks");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (bytes > 0 && list[i] == nullptr) usage(comm, op, what, "[", i, "] is null");
  }
}

void checkBuf(const Communicator& comm, const char* op, const void* p, size_t bytes) {
  if (bytes > 0 && p == nullptr) usage(comm, op, "buffer is null");
}

// Whether an op of `bytes` may start on the calling thread (see submit()).
bool small(const Communicator& comm, size_t bytes) { return bytes <= comm.config().smallBytes; }

OpSignature signature(OpKind op, DataType dtype, ReduceOp rop, int root, uint64_t count) {
  OpSignature s;
  s.op = op;
  s.dtype = dtype;
  s.redop = rop;
  s.root = root;
  s.count = count;
  return s;
}

// Submits algorithm `a`'s entry point (its options type is O's) with the
// options `o`, for `sig` moving `bytes` (see predictSeconds).
template <typename O, typename Entry = EntryOf<O>>
std::shared_ptr<Work> runAlgorithm(Communicator& comm, OpSignature sig, size_t bytes, const O& o,
                                   const Algorithm& a) {
  sig.algo = a.id;
  Entry entry = std::get<Entry>(a.entry);
  std::string what = sig.describe();
  if (a.isWire()) what += strCat(" wire=", kernels::wireDtypeName(algo::wireDtypeOf(comm.config())));
  return comm.submit(sig, o.timeout, [o, entry](OpContext& ctx) { return entry(ctx, o); }, what,
                     small(comm, bytes));
}

// Runs the algorithm the table chooses for `sig` moving `bytes`.
template <typename O>
std::shared_ptr<Work> run(Communicator& comm, OpSignature sig, size_t bytes, const O& o) {
  return runAlgorithm(comm, sig, bytes, o, chooseAlgorithm(comm.config(), comm.model(), sig.op, bytes));
}

}  // namespace

std::string rootRefusal(int size, int64_t root) {
  if (root >= 0 && root < size) return {};
  return strCat("root rank ", root, " is outside the group of ", size, " ranks");
}

namespace {

void checkRoot(const Communicator& comm, const char* op, int64_t root) {
  if (std::string why = rootRefusal(comm.size(), root); !why.empty()) usage(comm, op, why);
}

}  // namespace

std::shared_ptr<Work> allreduce(Communicator& comm, const AllreduceOptions& o) {
  const char* op = "allreduce";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkReduce(comm, op, o.dtype, o.op, o.premulFactor);
  checkBuf(comm, op, o.buf, bytes);
  OpSignature sig = signature(OpKind::kAllreduce, o.dtype, o.op, -1, o.count);
  if (const Algorithm* w = algo::wireAlgorithm(comm.config(), sig.op, o.dtype, o.op, bytes)) {
    return runAlgorithm(comm, sig, bytes, o, *w);
  }
  return run(comm, sig, bytes, o);
}

std::string algorithmFor(const Communicator& comm, OpKind op, DataType dtype, ReduceOp rop, size_t count) {
  MCCL_USAGE_CHECK(op == OpKind::kAllreduce || op == OpKind::kBroadcast || op == OpKind::kReduce,
                   "algorithmFor: ", opKindName(op), " is not chosen per buffer");
  const size_t bytes = count * dtypeSize(dtype);
  if (const Algorithm* w = algo::wireAlgorithm(comm.config(), op, dtype, rop, bytes)) {
    const kernels::WireDtype wd = algo::wireDtypeOf(comm.config());
    // The 16-bit rows serve two dtypes: say which.
    if (wd == kernels::WireDtype::kInt8) return w->name;
    return strCat(w->name, " (", kernels::wireDtypeName(wd), ")");
  }
  return algo::chosenName(comm.config(), comm.model(), op, bytes);
}

std::shared_ptr<Work> broadcast(Communicator& comm, const BroadcastOptions& o) {
  const char* op = "broadcast";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.buf, bytes);
  return run(comm, signature(OpKind::kBroadcast, o.dtype, ReduceOp::kSum, o.root, o.count), bytes, o);
}

std::shared_ptr<Work> reduce(Communicator& comm, const ReduceOptions& o) {
  const char* op = "reduce";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkReduce(comm, op, o.dtype, o.op, o.premulFactor);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.buf, bytes);
  return run(comm, signature(OpKind::kReduce, o.dtype, o.op, o.root, o.count), bytes, o);
}

std::shared_ptr<Work> allgather(Communicator& comm, const AllgatherOptions& o) {
  const char* op = "allgather";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkList(comm, op, "output list", o.out, bytes);
  checkBuf(comm, op, o.in, bytes);
  return run(comm, signature(OpKind::kAllgather, o.dtype, ReduceOp::kSum, -1, o.count), bytes, o);
}

std::shared_ptr<Work> reduceScatter(Communicator& comm, const ReduceScatterOptions& o) {
  const char* op = "reduce_scatter";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkReduce(comm, op, o.dtype, o.op, o.premulFactor);
  checkList(comm, op, "input list", o.in, bytes);
  checkBuf(comm, op, o.out, bytes);
  // The algorithms use the output as scratch before they have read every
  // input block (the ring reads this rank's own block last).
  const auto* out = static_cast<const uint8_t*>(o.out);
  for (size_t r = 0; r < o.in.size() && bytes > 0; ++r) {
    const auto* in = static_cast<const uint8_t*>(o.in[r]);
    if (out < in + bytes && in < out + bytes) {
      usage(comm, op, "the output overlaps input block ", r, " (", bytes,
            " bytes each); reduce into a separate buffer and copy");
    }
  }
  OpSignature sig = signature(OpKind::kReduceScatter, o.dtype, o.op, -1, o.count);
  // MCCL_WIRE_DTYPE_MIN_BYTES counts the input, every rank's block.
  if (const Algorithm* w = algo::wireAlgorithm(comm.config(), sig.op, o.dtype, o.op,
                                               bytes * static_cast<size_t>(comm.size()))) {
    return runAlgorithm(comm, sig, bytes, o, *w);
  }
  return run(comm, sig, bytes, o);
}

std::shared_ptr<Work> gather(Communicator& comm, const GatherOptions& o) {
  const char* op = "gather";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.in, bytes);
  if (comm.rank() == o.root) checkList(comm, op, "output list", o.out, bytes);
  return run(comm, signature(OpKind::kGather, o.dtype, ReduceOp::kSum, o.root, o.count), bytes, o);
}

std::shared_ptr<Work> scatter(Communicator& comm, const ScatterOptions& o) {
  const char* op = "scatter";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.out, bytes);
  if (comm.rank() == o.root) checkList(comm, op, "input list", o.in, bytes);
  return run(comm, signature(OpKind::kScatter, o.dtype, ReduceOp::kSum, o.root, o.count), bytes, o);
}

std::shared_ptr<Work> alltoall(Communicator& comm, const AlltoallOptions& o) {
  const char* op = "alltoall";
  const size_t n = static_cast<size_t>(comm.size());
  if (o.in.size() != n || o.out.size() != n || o.inCounts.size() != n || o.outCounts.size() != n) {
    usage(comm, op, "expected ", n, " inputs, outputs and counts, got ", o.in.size(), ", ",
          o.out.size(), ", ", o.inCounts.size(), " and ", o.outCounts.size());
  }
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    checkBuf(comm, op, o.in[i], bytesOf(comm, op, o.inCounts[i], o.dtype));
    checkBuf(comm, op, o.out[i], bytesOf(comm, op, o.outCounts[i], o.dtype));
    total += o.inCounts[i];
  }
  const size_t self = static_cast<size_t>(comm.rank());
  if (o.inCounts[self] != o.outCounts[self]) {
    usage(comm, op, "this rank sends ", o.inCounts[self], " elements to itself but expects ",
          o.outCounts[self]);
  }
  return run(comm, signature(OpKind::kAlltoall, o.dtype, ReduceOp::kSum, -1, 0),
             total * dtypeSize(o.dtype), o);
}

std::shared_ptr<Work> barrier(Communicator& comm, Timeout timeout) {
  const Algorithm& a = chooseAlgorithm(comm.config(), comm.model(), OpKind::kBarrier, 0);
  auto sig = signature(OpKind::kBarrier, DataType::kUInt8, ReduceOp::kSum, -1, 0);
  sig.algo = a.id;
  auto entry = std::get<algo::BarrierEntry>(a.entry);
  return comm.submit(sig, timeout, [entry](OpContext& ctx) { return entry(ctx); },
                     sig.describe(), /*small=*/true);
}

std::shared_ptr<Work> send(Communicator& comm, int peer, uint32_t tag, const void* buf,
                           size_t count, DataType dtype, Timeout timeout) {
  size_t bytes = bytesOf(comm, "send", count, dtype);
  checkBuf(comm, "send", buf, bytes);
  return comm.send(peer, tag, buf, bytes, dtype, count, timeout);
}

std::shared_ptr<Work> recv(Communicator& comm, int peer, uint32_t tag, void* buf, size_t count,
                           DataType dtype, Timeout timeout) {
  size_t bytes = bytesOf(comm, "recv", count, dtype);
  checkBuf(comm, "recv", buf, bytes);
  return comm.recv(peer, tag, buf, bytes, dtype, count, timeout);
}

}  // namespace mccl
