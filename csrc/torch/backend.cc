#include "backend.h"

#include <ATen/ATen.h>
#include <stdexcept>
#include <c10/util/Exception.h>

#include "algo/collectives.h"
#include "args.h"
#include "device/callbacks.h"
#include "util/error.h"
#include "util/params.h"
#include "util/trace.h"
#include "store_bridge.h"
#include "work.h"

namespace mccl::torch_adapter {

namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Every op starts here: the calling thread is about to use its device, so
// the Futures of MPS ops it issued earlier are marked here, their callbacks
// run in its order (device/callbacks.h). Then the op's arguments are checked.
Args enter(const Communicator& comm, const char* op) {
  trace::record(trace::Ev::kCallEntered, comm.rank(), comm.groupId(), 0, 0);
  runMarksOfThisThread();
  return Args(comm, op);
}

// Runs `submit`, turning core usage errors into ValueError and the rest into
// DistBackendError.
template <typename F>
std::shared_ptr<Work> call(F&& submit) {
  try {
    return submit();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    rethrowAsTorch(e);
  }
}

WorkPtr finish(const Communicator& comm, OpType type, const char* title,
               std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
               std::vector<std::shared_ptr<Work>> core, Staging staging) {
  auto work = c10::make_intrusive<WorkMCCL>(comm.rank(), type, title, std::move(outputs),
                                            std::move(inputs), staging.devices(),
                                            staging.callbacksOnCaller());
  work->setTraceGroup(comm.groupId());
  work->track(std::move(core), std::move(staging));
  return work;
}

// Pointers to consecutive blocks of `count` elements in a flat view.
template <typename P>
std::vector<P> blocks(const View& v, int n, size_t count) {
  std::vector<P> out;
  size_t bytes = count * dtypeSize(v.dtype);
  for (int b = 0; b < n; ++b) out.push_back(static_cast<uint8_t*>(v.data) + static_cast<size_t>(b) * bytes);
  return out;
}

// ---- option builders, one per op family --------------------------------

template <typename O>
O reducing(O o, const CoreReduce& r) {
  o.op = r.op;
  o.premulFactor = r.premulFactor;
  return o;
}

AllreduceOptions allreduceOpts(const View& v, const CoreReduce& r, Timeout t) {
  AllreduceOptions o;
  o.buf = v.data;
  o.count = v.count;
  o.dtype = v.dtype;
  o.timeout = t;
  return reducing(o, r);
}

ReduceOptions reduceOpts(const View& v, const CoreReduce& r, int64_t root, Timeout t) {
  ReduceOptions o;
  o.buf = v.data;
  o.count = v.count;
  o.dtype = v.dtype;
  o.root = static_cast<int>(root);
  o.timeout = t;
  return reducing(o, r);
}

BroadcastOptions broadcastOpts(const View& v, int64_t root, Timeout t) {
  return BroadcastOptions{v.data, v.count, v.dtype, static_cast<int>(root), t};
}

AllgatherOptions allgatherOpts(const View& in, std::vector<void*> out, Timeout t) {
  AllgatherOptions o;
  o.in = in.data;
  o.out = std::move(out);
  o.count = in.count;
  o.dtype = in.dtype;
  o.timeout = t;
  return o;
}

ReduceScatterOptions reduceScatterOpts(std::vector<const void*> in, const View& out,
                                       const CoreReduce& r, Timeout t) {
  ReduceScatterOptions o;
  o.in = std::move(in);
  o.out = out.data;
  o.count = out.count;
  o.dtype = out.dtype;
  o.timeout = t;
  return reducing(o, r);
}

}  // namespace

size_t ProcessGroupMCCL::pieceElementsFor(size_t pieceBytes, size_t nbytes, size_t elementSize) {
  // Decided from sizes only (not device, not layout), so every rank of a
  // mixed group splits an op the same way.
  if (pieceBytes == 0 || nbytes < 2 * pieceBytes) return 0;
  // Whole groups of 256 elements per piece, so that the int8 wire's groups
  // (counted from each op's first element) fall where they would in one op.
  constexpr size_t kGroup = 256;
  return std::max(kGroup, pieceBytes / elementSize / kGroup * kGroup);
}

size_t ProcessGroupMCCL::pieceElements(const at::Tensor& t) const {
  return pieceElementsFor(comm_->config().pieceBytes, t.nbytes(), t.element_size());
}

std::string ProcessGroupMCCL::algorithmFor(const std::string& op, const at::Tensor& t) const {
  const OpKind kind = op == "all_reduce" ? OpKind::kAllreduce
                      : op == "broadcast" ? OpKind::kBroadcast
                      : op == "reduce"    ? OpKind::kReduce
                                          : throw std::invalid_argument(
                                                "algorithm_for: '" + op + "' is not all_reduce, broadcast or reduce");
  size_t per = 1;
  const DataType dt = coreDtype(t.scalar_type(), "algorithm_for", &per);
  const size_t numel = static_cast<size_t>(t.numel());
  auto name = [&](size_t elements) { return mccl::algorithmFor(*comm_, kind, dt, ReduceOp::kSum, elements * per); };
  const size_t piece = kind == OpKind::kAllreduce ? pieceElements(t) : 0;  // as runInPieces cuts them
  if (piece == 0) return name(numel);
  const size_t pieces = (numel + piece - 1) / piece, last = numel - (pieces - 1) * piece;
  const std::string first = name(piece), end = name(last);
  if (first == end) return strCat(first, " in ", pieces, " pieces");
  return strCat(first, " in ", pieces - 1, " pieces and ", end, " for the last");
}

template <typename MakeOp>
WorkPtr ProcessGroupMCCL::runInPieces(at::Tensor& t, OpType type, const char* title,
                                      const std::string& who, MakeOp&& makeOp) {
  const auto per = static_cast<int64_t>(pieceElements(t));
  // A strided tensor: the pieces are of a contiguous copy (made on the
  // caller's stream), copied back into `t` once every piece is done.
  at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  at::Tensor flat = c.view({-1});
  std::vector<Staging> pieces;
  std::vector<std::shared_ptr<Work>> cores;
  OneOpScope oneOp;  // nothing comes between the pieces on the caller's stream
  for (int64_t at = 0; at < flat.numel(); at += per) {
    Staging st(who);
    View v = st.inout(flat.narrow(0, at, std::min(per, flat.numel() - at)));
    if (at + per >= flat.numel() && !t.is_contiguous()) st.copyBackAtEnd(t, c);
    cores.push_back(submit(st, makeOp(v)));
    pieces.push_back(std::move(st));
  }
  auto work = c10::make_intrusive<WorkMCCL>(comm_->rank(), type, title, std::vector<at::Tensor>{t},
                                            std::vector<at::Tensor>{t}, pieces[0].devices(),
                                            pieces[0].callbacksOnCaller());
  work->setTraceGroup(comm_->groupId());
  work->trackPieces(std::move(cores), std::move(pieces));
  return work;
}

template <typename F>
std::shared_ptr<Work> ProcessGroupMCCL::submit(Staging& st, F&& fn) {
  const auto& stage = st.device();
  EventPtr staged = stage ? stage->seal() : nullptr;
  if (!stage && !queue_.busy()) return call(fn);
  // Device inputs are still being copied to the host, or an earlier op
  // waits for its copies: the submit thread hands this one to the core in
  // turn. The caller gets a Work that completes with the core's.
  auto placeholder = std::make_shared<Work>(st.who());
  auto deadline = std::chrono::steady_clock::now() + timeout_.load();
  std::function<std::shared_ptr<Work>()> body = std::forward<F>(fn);
  queue_.push([stage, staged, deadline, body = std::move(body), placeholder] {
    try {
      if (stage && staged) stage->waitStaged(staged, deadline);
      std::shared_ptr<Work> real = call(body);
      real->onComplete([placeholder, real] {
        placeholder->setSourceRank(real->sourceRank());
        placeholder->complete(real->exception());
      });
    } catch (...) {
      placeholder->complete(std::current_exception());
    }
  });
  return placeholder;
}

ProcessGroupMCCL::ProcessGroupMCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout,
                                   std::string groupName, std::string routeHost,
                                   const std::map<std::string, std::string>& settings)
    : c10d::Backend(rank, size), timeout_(timeout) {
  CommConfig cfg;
  try {
    cfg = CommConfig::fromEnv(rank, size);
    for (const auto& [env, value] : settings) cfg.applySetting(env, value);
    setCallbackDeadlineMs(params::callbackDeadlineMs());  // for the callback runners (device/callbacks.h)
  } catch (const std::exception& e) {
    rethrowAsTorch(e);
  }
  cfg.groupName = groupName.empty() ? "default" : groupName;
  cfg.timeout = timeout;
  cfg.routeHost = std::move(routeHost);
  try {
    comm_ = Communicator::create(std::make_shared<C10dStore>(store), cfg);
  } catch (const std::exception& e) {
    rethrowAsTorch(e);
  }
}

ProcessGroupMCCL::ProcessGroupMCCL(std::shared_ptr<Communicator> comm,
                                   std::chrono::milliseconds timeout)
    : c10d::Backend(comm->rank(), comm->size()), comm_(std::move(comm)), timeout_(timeout) {}

#ifdef MCCL_TORCH_HAS_SHRINK
c10::intrusive_ptr<c10d::Backend> ProcessGroupMCCL::shrink(const std::vector<int64_t>& ranksToExclude,
                                                           int shrinkFlags,
                                                           const c10::intrusive_ptr<Options>& optsOverride) {
  Args a = enter(*comm_, "shrink_group");
  constexpr int kShrinkAbort = 1;  // torch.distributed.SHRINK_ABORT
  TORCH_CHECK_VALUE(shrinkFlags == 0 || shrinkFlags == kShrinkAbort, a.who(), ": shrink_flags ",
                    shrinkFlags, " is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)");
  TORCH_CHECK_VALUE(!optsOverride, a.who(), ": pg_options are not taken; mccl reads its settings from MCCL_*");
  std::vector<int> excluded;
  for (int64_t r : ranksToExclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < a.size(), a.who(), ": rank ", r, " is outside the group of ", a.size());
    excluded.push_back(static_cast<int>(r));
  }
  const bool abortPending = shrinkFlags == kShrinkAbort;
  // Ops still waiting for their device inputs reach the core in order
  // first (with SHRINK_ABORT they then fail with the rest).
  if (!abortPending) queue_.stop();
  std::shared_ptr<Communicator> child;
  try {
    child = comm_->shrink(excluded, abortPending, comm_->config().groupName + "/shrunk");
  } catch (const std::exception& e) {
    rethrowAsTorch(e);
  }
  queue_.stop();
  return c10::make_intrusive<ProcessGroupMCCL>(std::move(child), timeout_.load());
}
#endif

ProcessGroupMCCL::~ProcessGroupMCCL() {
  queue_.stop();
  if (comm_) comm_->shutdown();
}

std::string ProcessGroupMCCL::address() const { return comm_->address().toString(); }

std::chrono::milliseconds ProcessGroupMCCL::opTimeout(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout || requested.count() <= 0 ? timeout_.load() : requested;
}

void ProcessGroupMCCL::setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

void ProcessGroupMCCL::abort() {
  comm_->abort();  // first: queued ops then fail at once
  queue_.stop();
}

void ProcessGroupMCCL::shutdown() {
  queue_.stop();
  comm_->shutdown();
}

// Every override below checks all of its arguments (Args) before it stages
// or submits anything, then builds the core options and submits. Ops of
// several core ops stage every tensor before they submit the first: staging
// can still refuse (tensors on two devices), and a refusal after a submit
// would free memory that a running core op writes.

WorkPtr ProcessGroupMCCL::allreduce(std::vector<at::Tensor>& tensors,
                                    const c10d::AllreduceOptions& opts) {
  if (tensors.size() > 1) {
    c10d::AllreduceCoalescedOptions co;
    co.reduceOp = opts.reduceOp;
    co.timeout = opts.timeout;
    return allreduce_coalesced(tensors, co);
  }
  Args a = enter(*comm_, "allreduce");
  a.single(tensors, "tensor");
  CoreReduce red = a.reduce(opts.reduceOp, tensors[0].scalar_type());
  const Timeout t = opTimeout(opts.timeout);
  if (pieceElements(tensors[0]) > 0) {
    return runInPieces(tensors[0], OpType::ALLREDUCE, "mccl:all_reduce", a.who(), [&](const View& v) {
      return [o = allreduceOpts(v, red, t), this] { return mccl::allreduce(*comm_, o); };
    });
  }
  Staging st(a.who());
  AllreduceOptions o = allreduceOpts(st.inout(tensors[0]), red, t);
  auto w = submit(st, [=, this] { return mccl::allreduce(*comm_, o); });
  return finish(*comm_, OpType::ALLREDUCE, "mccl:all_reduce", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions&) {
  TORCH_CHECK_VALUE(false, Args(*comm_, "allreduce").who(), ": sparse tensors are not supported (",
                    tensors.empty() ? std::string("no tensor") : c10::str(tensors[0].layout()),
                    "); call .to_dense() first");
}

WorkPtr ProcessGroupMCCL::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                              const c10d::AllreduceCoalescedOptions& opts) {
  Args a = enter(*comm_, "allreduce_coalesced");
  a.nonEmpty(tensors, "tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    a.tensor(tensors[i], at("tensors", i));
    a.sameDtype(tensors[i], at("tensors", i), tensors[0], "tensors[0]");
  }
  CoreReduce red = a.reduce(opts.reduceOp, tensors[0].scalar_type());
  Staging st(a.who());
  AllreduceOptions o = allreduceOpts(st.flatten(tensors, /*writeBack=*/true), red,
                                     opTimeout(opts.timeout));
  auto w = submit(st, [=, this] { return mccl::allreduce(*comm_, o); });
  return finish(*comm_, OpType::ALLREDUCE_COALESCED, "mccl:all_reduce_coalesced", tensors, tensors,
                {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::broadcast(std::vector<at::Tensor>& tensors,
                                    const c10d::BroadcastOptions& opts) {
  Args a = enter(*comm_, "broadcast");
  a.single(tensors, "tensor");
  a.root(opts.rootRank, opts.rootTensor);
  // Not in pieces: on the 2-core CI machine a 64 MiB broadcast in 4 MiB
  // pieces took 10 % longer (each piece's chain fills and drains).
  Staging st(a.who());
  BroadcastOptions o = broadcastOpts(st.inout(tensors[0]), opts.rootRank, opTimeout(opts.timeout));
  auto w = submit(st, [=, this] { return mccl::broadcast(*comm_, o); });
  return finish(*comm_, OpType::BROADCAST, "mccl:broadcast", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::reduce(std::vector<at::Tensor>& tensors,
                                 const c10d::ReduceOptions& opts) {
  Args a = enter(*comm_, "reduce");
  a.single(tensors, "tensor");
  a.root(opts.rootRank, opts.rootTensor);
  CoreReduce red = a.reduce(opts.reduceOp, tensors[0].scalar_type());
  Staging st(a.who());
  ReduceOptions o = reduceOpts(st.inout(tensors[0]), red, opts.rootRank, opTimeout(opts.timeout));
  auto w = submit(st, [=, this] { return mccl::reduce(*comm_, o); });
  return finish(*comm_, OpType::REDUCE, "mccl:reduce", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                    std::vector<at::Tensor>& inputs,
                                    const c10d::AllgatherOptions& opts) {
  // torch: all_gather(tensor_list, tensor) reaches here as ([tensor_list], [tensor]).
  Args a = enter(*comm_, "allgather");
  a.single(inputs, "tensor");
  TORCH_CHECK_VALUE(outputs.size() == 1, a.who(), ": expected one output list, got ", outputs.size());
  auto& outs = outputs[0];
  a.perRank(outs, "output list");
  for (size_t r = 0; r < outs.size(); ++r) a.like(outs[r], at("tensor_list", r), inputs[0], "the input");
  Staging st(a.who());
  View in = st.input(inputs[0]);
  std::vector<void*> out;
  for (auto& t : outs) out.push_back(st.output(t).data);
  AllgatherOptions o = allgatherOpts(in, std::move(out), opTimeout(opts.timeout));
  auto w = submit(st, [=, this] { return mccl::allgather(*comm_, o); });
  return finish(*comm_, OpType::ALLGATHER, "mccl:all_gather", outs, inputs, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::_allgather_base(at::Tensor& output, at::Tensor& input,
                                          const c10d::AllgatherOptions& opts) {
  Args a = enter(*comm_, "allgather_into_tensor");
  a.tensor(input, "input");
  a.like(output, "output", input, "input", /*timesWorld=*/true);
  Staging st(a.who());
  View in = st.input(input);
  View out = st.output(output);
  AllgatherOptions o = allgatherOpts(in, blocks<void*>(out, a.size(), in.count), opTimeout(opts.timeout));
  auto w = submit(st, [=, this] { return mccl::allgather(*comm_, o); });
  return finish(*comm_, OpType::_ALLGATHER_BASE, "mccl:_all_gather_base", {output}, {input}, {w},
                std::move(st));
}

WorkPtr ProcessGroupMCCL::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                              std::vector<at::Tensor>& inputs,
                                              const c10d::AllgatherOptions& opts) {
  // torch's layout: output_tensor_lists[r][i] receives rank r's input i
  // (one list per rank, each as long as the input list).
  Args a = enter(*comm_, "allgather_coalesced");
  const char* outName = "output_tensor_lists";
  a.nonEmpty(inputs, "input_tensor_list");
  TORCH_CHECK_VALUE(static_cast<int>(outputLists.size()) == a.size(), a.who(), ": ", outName,
                    " has ", outputLists.size(), " lists but the group has ", a.size(),
                    " ranks (one list per rank)");
  for (size_t i = 0; i < inputs.size(); ++i) a.tensor(inputs[i], at("input_tensor_list", i));
  for (size_t r = 0; r < outputLists.size(); ++r) {
    TORCH_CHECK_VALUE(outputLists[r].size() == inputs.size(), a.who(), ": ", at(outName, r),
                      " has ", outputLists[r].size(), " tensors but input_tensor_list has ",
                      inputs.size(), " (one per input)");
    for (size_t i = 0; i < inputs.size(); ++i) {
      a.like(outputLists[r][i], at(outName, r, i), inputs[i], at("input_tensor_list", i));
    }
  }
  Staging st(a.who());
  std::vector<AllgatherOptions> ops;
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    View in = st.input(inputs[i]);
    std::vector<void*> out;
    for (auto& list : outputLists) {
      out.push_back(st.output(list[i]).data);
      outs.push_back(list[i]);
    }
    ops.push_back(allgatherOpts(in, std::move(out), opTimeout(opts.timeout)));
  }
  std::vector<std::shared_ptr<Work>> core;
  for (const auto& o : ops) core.push_back(submit(st, [=, this] { return mccl::allgather(*comm_, o); }));
  return finish(*comm_, OpType::ALLGATHER_COALESCED, "mccl:all_gather_coalesced", outs, inputs,
                core, std::move(st));
}

WorkPtr ProcessGroupMCCL::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
  Args a = enter(*comm_, "allgather_into_tensor_coalesced");
  a.pairs(outputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    a.tensor(inputs[i], at("inputs", i));
    a.like(outputs[i], at("outputs", i), inputs[i], at("inputs", i), /*timesWorld=*/true);
  }
  Staging st(a.who());
  std::vector<AllgatherOptions> ops;
  for (size_t i = 0; i < inputs.size(); ++i) {
    View in = st.input(inputs[i]);
    View out = st.output(outputs[i]);
    ops.push_back(allgatherOpts(in, blocks<void*>(out, a.size(), in.count), opTimeout(opts.timeout)));
  }
  std::vector<std::shared_ptr<Work>> core;
  for (const auto& o : ops) core.push_back(submit(st, [=, this] { return mccl::allgather(*comm_, o); }));
  return finish(*comm_, OpType::COALESCED, "mccl:all_gather_into_tensor_coalesced", outputs,
                inputs, core, std::move(st));
}

WorkPtr ProcessGroupMCCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                 std::vector<at::Tensor>& inputs,
                                 const c10d::GatherOptions& opts) {
  Args a = enter(*comm_, "gather");
  a.single(inputs, "tensor");
  a.root(opts.rootRank, 0);
  std::vector<at::Tensor> outs = a.rootList(outputs, opts.rootRank, inputs[0], "output");
  Staging st(a.who());
  GatherOptions o;
  View in = st.input(inputs[0]);
  o.in = in.data;
  o.count = in.count;
  o.dtype = in.dtype;
  o.root = static_cast<int>(opts.rootRank);
  o.timeout = opTimeout(opts.timeout);
  for (auto& t : outs) o.out.push_back(st.output(t).data);
  auto w = submit(st, [=, this] { return mccl::gather(*comm_, o); });
  return finish(*comm_, OpType::GATHER, "mccl:gather", outs, inputs, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::scatter(std::vector<at::Tensor>& outputs,
                                  std::vector<std::vector<at::Tensor>>& inputs,
                                  const c10d::ScatterOptions& opts) {
  Args a = enter(*comm_, "scatter");
  a.single(outputs, "tensor");
  a.root(opts.rootRank, 0);
  std::vector<at::Tensor> ins = a.rootList(inputs, opts.rootRank, outputs[0], "input");
  Staging st(a.who());
  ScatterOptions o;
  View out = st.output(outputs[0]);
  o.out = out.data;
  o.count = out.count;
  o.dtype = out.dtype;
  o.root = static_cast<int>(opts.rootRank);
  o.timeout = opTimeout(opts.timeout);
  for (auto& t : ins) o.in.push_back(st.input(t).data);
  auto w = submit(st, [=, this] { return mccl::scatter(*comm_, o); });
  return finish(*comm_, OpType::SCATTER, "mccl:scatter", outputs, ins, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::reduce_scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ReduceScatterOptions& opts) {
  // torch: reduce_scatter(output, input_list) reaches here as ([output], [input_list]).
  Args a = enter(*comm_, "reduce_scatter");
  a.single(outputs, "output");
  TORCH_CHECK_VALUE(inputs.size() == 1, a.who(), ": expected one input list, got ", inputs.size());
  a.perRank(inputs[0], "input list");
  for (size_t r = 0; r < inputs[0].size(); ++r) a.like(inputs[0][r], at("input_list", r), outputs[0], "the output");
  CoreReduce red = a.reduce(opts.reduceOp, outputs[0].scalar_type());
  Staging st(a.who());
  View out = st.outputApart(outputs[0], inputs[0]);  // in place: output is one of the inputs
  std::vector<const void*> in;
  for (auto& t : inputs[0]) in.push_back(st.inputApart(t, outputs[0]).data);
  ReduceScatterOptions o = reduceScatterOpts(std::move(in), out, red, opTimeout(opts.timeout));
  auto w = submit(st, [=, this] { return mccl::reduceScatter(*comm_, o); });
  return finish(*comm_, OpType::REDUCE_SCATTER, "mccl:reduce_scatter", outputs, inputs[0], {w},
                std::move(st));
}

WorkPtr ProcessGroupMCCL::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                               const c10d::ReduceScatterOptions& opts) {
  Args a = enter(*comm_, "reduce_scatter_tensor");
  a.tensor(output, "output");
  a.like(input, "input", output, "output", /*timesWorld=*/true);
  CoreReduce red = a.reduce(opts.reduceOp, output.scalar_type());
  Staging st(a.who());
  View in = st.inputApart(input, output);
  View out = st.outputApart(output, {input});  // in place: output is a block of the input
  ReduceScatterOptions o = reduceScatterOpts(blocks<const void*>(in, a.size(), out.count), out, red,
                                             opTimeout(opts.timeout));
  auto w = submit(st, [=, this] { return mccl::reduceScatter(*comm_, o); });
  return finish(*comm_, OpType::_REDUCE_SCATTER_BASE, "mccl:_reduce_scatter_base", {output},
                {input}, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::ReduceScatterOptions& opts) {
  Args a = enter(*comm_, "reduce_scatter_tensor_coalesced");
  a.pairs(outputs.size(), inputs.size());
  std::vector<CoreReduce> reds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    a.tensor(outputs[i], at("outputs", i));
    a.like(inputs[i], at("inputs", i), outputs[i], at("outputs", i), /*timesWorld=*/true);
    reds.push_back(a.reduce(opts.reduceOp, outputs[i].scalar_type()));
  }
  Staging st(a.who());
  std::vector<ReduceScatterOptions> ops;
  for (size_t i = 0; i < inputs.size(); ++i) {
    View in = st.inputApart(inputs[i], outputs[i]);
    View out = st.outputApart(outputs[i], inputs);  // in place: a block of an input
    ops.push_back(reduceScatterOpts(blocks<const void*>(in, a.size(), out.count), out, reds[i],
                                    opTimeout(opts.timeout)));
  }
  std::vector<std::shared_ptr<Work>> core;
  for (const auto& o : ops) core.push_back(submit(st, [=, this] { return mccl::reduceScatter(*comm_, o); }));
  return finish(*comm_, OpType::COALESCED, "mccl:reduce_scatter_tensor_coalesced", outputs,
                inputs, core, std::move(st));
}

WorkPtr ProcessGroupMCCL::alltoall_base(at::Tensor& output, at::Tensor& input,
                                        std::vector<int64_t>& outputSplitSizes,
                                        std::vector<int64_t>& inputSplitSizes,
                                        const c10d::AllToAllOptions& opts) {
  Args a = enter(*comm_, "alltoall_base");
  a.tensor(input, "input");
  a.tensor(output, "output");
  a.sameDtype(output, "output", input, "input");
  const int n = a.size();
  // Splits are in rows of dim 0; none given means equal splits.
  auto rowsOf = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<int64_t> rows;
    int64_t dim0 = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      TORCH_CHECK_VALUE(dim0 % n == 0, a.who(), ": ", what, " has ", dim0,
                        " rows, which do not split evenly over ", n, " ranks; pass split sizes");
      rows.assign(static_cast<size_t>(n), dim0 / n);
    } else {
      TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == n, a.who(), ": ", what,
                        " split sizes have ", splits.size(), " entries for ", n, " ranks");
      int64_t sum = 0;
      for (int64_t s : splits) {
        TORCH_CHECK_VALUE(s >= 0, a.who(), ": negative ", what, " split size ", s);
        sum += s;
      }
      TORCH_CHECK_VALUE(sum == dim0, a.who(), ": ", what, " split sizes sum to ", sum,
                        " but the tensor has ", dim0, " rows");
      rows = splits;
    }
    return rows;
  };
  auto inRows = rowsOf(input, inputSplitSizes, "input");
  auto outRows = rowsOf(output, outputSplitSizes, "output");
  const int64_t inRow = input.dim() == 0 || input.size(0) == 0 ? 0 : input.numel() / input.size(0);
  const int64_t outRow = output.dim() == 0 || output.size(0) == 0 ? 0 : output.numel() / output.size(0);
  Staging st(a.who());
  View in = st.inputApart(input, output);
  View out = st.outputApart(output, {input});  // in place: all_to_all_single(t, t)
  // Core elements per tensor element (2 for complex); from whichever side
  // has elements (a rank may send nothing and still receive).
  const size_t per = input.numel() > 0 ? in.count / static_cast<size_t>(input.numel())
                     : output.numel() > 0 ? out.count / static_cast<size_t>(output.numel())
                                          : 1;
  const size_t es = dtypeSize(in.dtype);
  AlltoallOptions o;
  o.dtype = in.dtype;
  o.timeout = opTimeout(opts.timeout);
  size_t inAt = 0, outAt = 0;
  for (int p = 0; p < n; ++p) {
    size_t ic = static_cast<size_t>(inRows[static_cast<size_t>(p)] * inRow) * per;
    size_t oc = static_cast<size_t>(outRows[static_cast<size_t>(p)] * outRow) * per;
    o.in.push_back(static_cast<uint8_t*>(in.data) + inAt * es);
    o.inCounts.push_back(ic);
    o.out.push_back(static_cast<uint8_t*>(out.data) + outAt * es);
    o.outCounts.push_back(oc);
    inAt += ic;
    outAt += oc;
  }
  auto w = submit(st, [=, this] { return mccl::alltoall(*comm_, o); });
  return finish(*comm_, OpType::ALLTOALL_BASE, "mccl:all_to_all", {output}, {input}, {w},
                std::move(st));
}

WorkPtr ProcessGroupMCCL::alltoall(std::vector<at::Tensor>& outputs,
                                   std::vector<at::Tensor>& inputs,
                                   const c10d::AllToAllOptions& opts) {
  // torch: all_to_all(output_tensor_list, input_tensor_list): input i goes
  // to rank i, output i comes from rank i; sizes may differ per rank.
  Args a = enter(*comm_, "alltoall");
  a.perRank(inputs, "input_tensor_list");
  a.perRank(outputs, "output_tensor_list");
  for (size_t p = 0; p < inputs.size(); ++p) {
    a.tensor(inputs[p], at("input_tensor_list", p));
    a.tensor(outputs[p], at("output_tensor_list", p));
    a.sameDtype(inputs[p], at("input_tensor_list", p), inputs[0], "input_tensor_list[0]");
    a.sameDtype(outputs[p], at("output_tensor_list", p), inputs[0], "input_tensor_list[0]");
  }
  Staging st(a.who());
  AlltoallOptions o;
  o.timeout = opTimeout(opts.timeout);
  for (size_t p = 0; p < inputs.size(); ++p) {
    View in = st.input(inputs[p]);
    View out = st.outputApart(outputs[p], inputs);  // in place: an output is an input
    o.dtype = in.dtype;
    o.in.push_back(in.data);
    o.inCounts.push_back(in.count);
    o.out.push_back(out.data);
    o.outCounts.push_back(out.count);
  }
  auto w = submit(st, [=, this] { return mccl::alltoall(*comm_, o); });
  return finish(*comm_, OpType::ALLTOALL, "mccl:all_to_all", outputs, inputs, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  Args a = enter(*comm_, "send");
  a.single(tensors, "tensor");
  a.tag(tag);
  a.peer(dstRank, "destination");
  const Timeout t = timeout_.load();  // the group's, as setTimeout() left it
  Staging st(a.who());
  View v = st.input(tensors[0]);
  auto w = submit(st, [=, this] {
    return mccl::send(*comm_, dstRank, static_cast<uint32_t>(tag), v.data, v.count, v.dtype, t);
  });
  return finish(*comm_, OpType::SEND, "mccl:send", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  Args a = enter(*comm_, "recv");
  a.single(tensors, "tensor");
  a.tag(tag);
  a.peer(srcRank, "source");
  const Timeout t = timeout_.load();  // the group's, as setTimeout() left it
  Staging st(a.who());
  View v = st.output(tensors[0]);
  auto w = submit(st, [=, this] {
    return mccl::recv(*comm_, srcRank, static_cast<uint32_t>(tag), v.data, v.count, v.dtype, t);
  });
  return finish(*comm_, OpType::RECV, "mccl:recv", tensors, {}, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Args a = enter(*comm_, "recv");
  a.single(tensors, "tensor");
  a.tag(tag);
  const Timeout t = timeout_.load();  // the group's, as setTimeout() left it
  Staging st(a.who());
  View v = st.output(tensors[0]);
  auto w = submit(st, [=, this] {
    return mccl::recv(*comm_, Communicator::kAnySource, static_cast<uint32_t>(tag), v.data,
                      v.count, v.dtype, t);
  });
  return finish(*comm_, OpType::RECVANYSOURCE, "mccl:recv_any_source", tensors, {}, {w},
                std::move(st));
}

WorkPtr ProcessGroupMCCL::barrier(const c10d::BarrierOptions& opts) {
  Staging st(enter(*comm_, "barrier").who());
  auto w = submit(st, [=, this] { return mccl::barrier(*comm_, opTimeout(opts.timeout)); });
  return finish(*comm_, OpType::BARRIER, "mccl:barrier", {}, {}, {w}, std::move(st));
}

}  // namespace mccl::torch_adapter
