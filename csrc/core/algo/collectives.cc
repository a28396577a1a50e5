// Entry points: validate on the caller's thread, pick the algorithm, enqueue.
#include "algo/collectives.h"

#include <cmath>
#include <limits>

#include "algo/common.h"
#include "algo/select.h"

namespace mccl {
namespace {

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
  if (!reduceSupported(dtype, rop)) {
    usage(comm, op, "reduce op ", reduceOpName(rop), " is not supported for dtype ",
          dtypeName(dtype),
          isFloating(dtype) ? " (bitwise ops need integer or bool tensors)"
                            : (rop == ReduceOp::kPreMulSum ? " (PREMUL_SUM needs a floating dtype)"
                                                           : ""));
  }
  if (rop == ReduceOp::kPreMulSum && !std::isfinite(factor)) {
    usage(comm, op, "PREMUL_SUM factor ", factor, " is not finite");
  }
}

void checkRoot(const Communicator& comm, const char* op, int root) {
  if (root < 0 || root >= comm.size()) {
    usage(comm, op, "root rank ", root, " is outside the group of ", comm.size(), " ranks");
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

OpSignature signature(OpKind op, DataType dtype, ReduceOp rop, int root, uint64_t count,
                      Algo algo) {
  OpSignature s;
  s.op = op;
  s.dtype = dtype;
  s.redop = rop;
  s.root = root;
  s.count = count;
  s.algo = algo;
  return s;
}

}  // namespace

std::shared_ptr<Work> allreduce(Communicator& comm, const AllreduceOptions& o) {
  const char* op = "allreduce";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkReduce(comm, op, o.dtype, o.op, o.premulFactor);
  checkBuf(comm, op, o.buf, bytes);
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kAllreduce, bytes);
  auto sig = signature(OpKind::kAllreduce, o.dtype, o.op, -1, o.count, a);
  auto body = a == Algo::kRing     ? &algo::allreduceRing
              : a == Algo::kDirect ? &algo::allreduceDirect
                                   : &algo::allreduceRecursiveDoubling;
  return comm.submit(sig, o.timeout, [o, body](OpContext& ctx) { return body(ctx, o); },
                     sig.describe(), small(comm, bytes));
}

std::shared_ptr<Work> broadcast(Communicator& comm, const BroadcastOptions& o) {
  const char* op = "broadcast";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.buf, bytes);
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kBroadcast, bytes);
  auto sig = signature(OpKind::kBroadcast, o.dtype, ReduceOp::kSum, o.root, o.count, a);
  auto body = a == Algo::kChain ? &algo::broadcastChain : &algo::broadcastBinomial;
  return comm.submit(sig, o.timeout, [o, body](OpContext& ctx) { return body(ctx, o); },
                     sig.describe(), small(comm, bytes));
}

std::shared_ptr<Work> reduce(Communicator& comm, const ReduceOptions& o) {
  const char* op = "reduce";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkReduce(comm, op, o.dtype, o.op, o.premulFactor);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.buf, bytes);
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kReduce, bytes);
  auto sig = signature(OpKind::kReduce, o.dtype, o.op, o.root, o.count, a);
  auto body = a == Algo::kChain ? &algo::reduceChain : &algo::reduceBinomial;
  return comm.submit(sig, o.timeout, [o, body](OpContext& ctx) { return body(ctx, o); },
                     sig.describe(), small(comm, bytes));
}

std::shared_ptr<Work> allgather(Communicator& comm, const AllgatherOptions& o) {
  const char* op = "allgather";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkList(comm, op, "output list", o.out, bytes);
  checkBuf(comm, op, o.in, bytes);
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kAllgather, bytes);
  auto sig = signature(OpKind::kAllgather, o.dtype, ReduceOp::kSum, -1, o.count, a);
  auto body = a == Algo::kRing ? &algo::allgatherRing : &algo::allgatherDirect;
  return comm.submit(sig, o.timeout, [o, body](OpContext& ctx) { return body(ctx, o); },
                     sig.describe(), small(comm, bytes));
}

std::shared_ptr<Work> reduceScatter(Communicator& comm, const ReduceScatterOptions& o) {
  const char* op = "reduce_scatter";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkReduce(comm, op, o.dtype, o.op, o.premulFactor);
  checkList(comm, op, "input list", o.in, bytes);
  checkBuf(comm, op, o.out, bytes);
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kReduceScatter, bytes);
  auto sig = signature(OpKind::kReduceScatter, o.dtype, o.op, -1, o.count, a);
  auto body = a == Algo::kRing ? &algo::reduceScatterRing : &algo::reduceScatterDirect;
  return comm.submit(sig, o.timeout, [o, body](OpContext& ctx) { return body(ctx, o); },
                     sig.describe(), small(comm, bytes));
}

std::shared_ptr<Work> gather(Communicator& comm, const GatherOptions& o) {
  const char* op = "gather";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.in, bytes);
  if (comm.rank() == o.root) checkList(comm, op, "output list", o.out, bytes);
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kGather, bytes);
  auto sig = signature(OpKind::kGather, o.dtype, ReduceOp::kSum, o.root, o.count, a);
  return comm.submit(sig, o.timeout, [o](OpContext& ctx) { return algo::gatherDirect(ctx, o); },
                     sig.describe(), small(comm, bytes));
}

std::shared_ptr<Work> scatter(Communicator& comm, const ScatterOptions& o) {
  const char* op = "scatter";
  size_t bytes = bytesOf(comm, op, o.count, o.dtype);
  checkRoot(comm, op, o.root);
  checkBuf(comm, op, o.out, bytes);
  if (comm.rank() == o.root) checkList(comm, op, "input list", o.in, bytes);
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kScatter, bytes);
  auto sig = signature(OpKind::kScatter, o.dtype, ReduceOp::kSum, o.root, o.count, a);
  return comm.submit(sig, o.timeout, [o](OpContext& ctx) { return algo::scatterDirect(ctx, o); },
                     sig.describe(), small(comm, bytes));
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
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kAlltoall, total * dtypeSize(o.dtype));
  auto sig = signature(OpKind::kAlltoall, o.dtype, ReduceOp::kSum, -1, 0, a);
  return comm.submit(sig, o.timeout, [o](OpContext& ctx) { return algo::alltoallPairwise(ctx, o); },
                     sig.describe(), small(comm, total * dtypeSize(o.dtype)));
}

std::shared_ptr<Work> barrier(Communicator& comm, Timeout timeout) {
  Algo a = algo::choose(comm.config(), comm.model(), OpKind::kBarrier, 0);
  auto sig = signature(OpKind::kBarrier, DataType::kUInt8, ReduceOp::kSum, -1, 0, a);
  return comm.submit(sig, timeout, [](OpContext& ctx) { return algo::barrierDissemination(ctx); },
                     sig.describe(), /*small=*/true);
}

std::shared_ptr<Work> send(Communicator& comm, int peer, uint32_t tag, const void* buf,
                           size_t count, DataType dtype) {
  size_t bytes = bytesOf(comm, "send", count, dtype);
  checkBuf(comm, "send", buf, bytes);
  return comm.send(peer, tag, buf, bytes, dtype, count);
}

std::shared_ptr<Work> recv(Communicator& comm, int peer, uint32_t tag, void* buf, size_t count,
                           DataType dtype) {
  size_t bytes = bytesOf(comm, "recv", count, dtype);
  checkBuf(comm, "recv", buf, bytes);
  return comm.recv(peer, tag, buf, bytes, dtype, count);
}

}  // namespace mccl
