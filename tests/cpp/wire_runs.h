// An all-reduce on n ranks (threads) with a wire dtype: every rank's result
// and its work's description, for the wire tests (test_wire_dtype.cc,
// test_wire_int8.cc).
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "harness.h"

namespace mccl::test {

template <class T>
struct WireRun {
  std::mutex mu;
  std::vector<std::vector<T>> out;
  std::vector<std::string> desc;
};

struct WireSettings {
  std::string wire;              // MCCL_WIRE_DTYPE
  std::string reduce = "ring";   // MCCL_WIRE_REDUCE
  size_t minBytes = 0;           // MCCL_WIRE_DTYPE_MIN_BYTES
};

// Rank r all-reduces `count` values input(r, i) of type T (sent as `dt`).
template <class T>
void allreduceOnWire(int n, size_t count, ReduceOp op, DataType dt, const WireSettings& s,
                     const std::function<T(int, size_t)>& input, WireRun<T>& run) {
  run.out.assign(static_cast<size_t>(n), {});
  run.desc.assign(static_cast<size_t>(n), "");
  runRanks(n, [&](Communicator& comm) {
    std::vector<T> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = input(comm.rank(), i);
    AllreduceOptions o;
    o.buf = v.data();
    o.count = count;
    o.dtype = dt;
    o.op = op;
    auto work = allreduce(comm, o);
    work->wait();
    std::lock_guard<std::mutex> lock(run.mu);
    run.out[static_cast<size_t>(comm.rank())] = v;
    run.desc[static_cast<size_t>(comm.rank())] = work->description();
  }, [&](CommConfig& c) {
    c.wireDtype = s.wire;
    c.wireDtypeMinBytes = s.minBytes;
    c.wireReduce = s.reduce;
    c.chunkBytes = 4096;  // many chunks even for small test buffers
  });
}

}  // namespace mccl::test
