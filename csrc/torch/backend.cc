#include "backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "algo/collectives.h"
#include "store_bridge.h"
#include "work.h"

namespace mccl::torch_adapter {

namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// "mccl allreduce (rank 1/4, group 'default_pg')"
std::string who(const Communicator& comm, const char* op) {
  return strCat("mccl ", op, " (rank ", comm.rank(), "/", comm.size(), ", group '",
                comm.config().groupName, "')");
}

void checkTensor(const Communicator& comm, const at::Tensor& t, const char* op) {
  TORCH_CHECK_VALUE(t.defined(), who(comm, op), ": undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, who(comm, op), ": ", t.layout(),
                    " tensors are not supported; use dense (strided) tensors");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda() || t.device().is_mps(),
                    who(comm, op), ": tensor on ", t.device(),
                    "; mccl takes CPU, CUDA and MPS tensors");
}

void checkSingle(const Communicator& comm, const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK_VALUE(ts.size() == 1, who(comm, op), ": expected one tensor, got ", ts.size());
  checkTensor(comm, ts[0], op);
}

void checkSameAs(const Communicator& comm, const at::Tensor& t, const at::Tensor& ref,
                 const char* op, const char* what) {
  checkTensor(comm, t, op);
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), who(comm, op), ": ", what, " has dtype ",
                   dtypeLabel(t.scalar_type()), " but the input has ", dtypeLabel(ref.scalar_type()));
  TORCH_CHECK_VALUE(t.numel() == ref.numel(), who(comm, op), ": ", what, " has ", t.numel(),
                    " elements but the input has ", ref.numel());
}

void checkRoot(const Communicator& comm, int64_t root, const char* op) {
  TORCH_CHECK_VALUE(root >= 0 && root < comm.size(), who(comm, op), ": root rank ", root,
                    " is outside the group of ", comm.size(), " ranks");
}

// gather's outputs / scatter's inputs: the root passes one list of a tensor
// per rank, each like `ref`; the other ranks pass none. Returns the root's.
std::vector<at::Tensor> rootList(const Communicator& comm, const std::vector<std::vector<at::Tensor>>& lists,
                                 int64_t rootRank, const at::Tensor& ref, const char* op,
                                 const char* what) {
  if (comm.rank() != rootRank) {
    TORCH_CHECK_VALUE(lists.empty() || lists[0].empty(), who(comm, op), ": only the root (rank ",
                      rootRank, ") takes ", what, " tensors");
    return {};
  }
  TORCH_CHECK_VALUE(lists.size() == 1 && static_cast<int>(lists[0].size()) == comm.size(),
                    who(comm, op), ": the root needs one ", what, " list of ", comm.size(), " tensors");
  const std::string each = strCat("an ", what, " tensor");
  for (const auto& t : lists[0]) checkSameAs(comm, t, ref, op, each.c_str());
  return lists[0];
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
                                            std::move(inputs), staging.devices());
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

}  // namespace

bool ProcessGroupMCCL::inPieces(const at::Tensor& t) const {
  // Decided from sizes only (not device, not layout), so every rank of a
  // mixed group splits an op the same way.
  size_t piece = comm_->config().pieceBytes;
  return piece > 0 && t.nbytes() >= 2 * piece;
}

template <typename MakeOp>
WorkPtr ProcessGroupMCCL::runInPieces(at::Tensor& t, OpType type, const char* title,
                                      const char* op, MakeOp&& makeOp) {
  const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(comm_->config().pieceBytes) /
                                               static_cast<int64_t>(t.element_size()));
  // A strided tensor: the pieces are of a contiguous copy (made on the
  // caller's stream), copied back into `t` once every piece is done.
  at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  at::Tensor flat = c.view({-1});
  std::vector<Staging> pieces;
  std::vector<std::shared_ptr<Work>> cores;
  for (int64_t at = 0; at < flat.numel(); at += per) {
    Staging st(who(*comm_, op));
    View v = st.inout(flat.narrow(0, at, std::min(per, flat.numel() - at)));
    if (at + per >= flat.numel() && !t.is_contiguous()) st.copyBackAtEnd(t, c);
    cores.push_back(submit(st, makeOp(v)));
    pieces.push_back(std::move(st));
  }
  auto work = c10::make_intrusive<WorkMCCL>(comm_->rank(), type, title, std::vector<at::Tensor>{t},
                                            std::vector<at::Tensor>{t}, pieces[0].devices());
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
  auto deadline = std::chrono::steady_clock::now() + timeout_;
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
                                   std::string groupName, std::string routeHost)
    : c10d::Backend(rank, size), timeout_(timeout) {
  CommConfig cfg;
  try {
    cfg = CommConfig::fromEnv(rank, size);
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

ProcessGroupMCCL::~ProcessGroupMCCL() {
  queue_.stop();
  if (comm_) comm_->shutdown();
}

std::string ProcessGroupMCCL::address() const { return comm_->address().toString(); }

std::chrono::milliseconds ProcessGroupMCCL::opTimeout(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout || requested.count() <= 0 ? timeout_ : requested;
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

WorkPtr ProcessGroupMCCL::allreduce(std::vector<at::Tensor>& tensors,
                                    const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  TORCH_CHECK_VALUE(!tensors.empty(), who(*comm_, op), ": no tensors");
  if (tensors.size() > 1) {
    c10d::AllreduceCoalescedOptions co;
    co.reduceOp = opts.reduceOp;
    co.timeout = opts.timeout;
    return allreduce_coalesced(tensors, co);
  }
  checkSingle(*comm_, tensors, op);
  CoreReduce red = coreReduce(opts.reduceOp, tensors[0].scalar_type(), who(*comm_, op));
  auto options = [&](const View& v) {
    AllreduceOptions o;
    o.buf = v.data;
    o.count = v.count;
    o.dtype = v.dtype;
    o.op = red.op;
    o.premulFactor = red.premulFactor;
    o.timeout = opTimeout(opts.timeout);
    return o;
  };
  if (inPieces(tensors[0])) {
    return runInPieces(tensors[0], OpType::ALLREDUCE, "mccl:all_reduce", op, [&](const View& v) {
      return [o = options(v), this] { return mccl::allreduce(*comm_, o); };
    });
  }
  Staging st(who(*comm_, op));
  AllreduceOptions o = options(st.inout(tensors[0]));
  auto w = submit(st, [=, this] { return mccl::allreduce(*comm_, o); });
  return finish(*comm_, OpType::ALLREDUCE, "mccl:all_reduce", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions&) {
  TORCH_CHECK_VALUE(false, who(*comm_, "allreduce"), ": sparse tensors are not supported (",
                    tensors.empty() ? std::string("no tensor") : c10::str(tensors[0].layout()),
                    "); call .to_dense() first");
}

WorkPtr ProcessGroupMCCL::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                              const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  TORCH_CHECK_VALUE(!tensors.empty(), who(*comm_, op), ": no tensors");
  for (const auto& t : tensors) {
    checkTensor(*comm_, t, op);
    TORCH_CHECK_TYPE(t.scalar_type() == tensors[0].scalar_type(), who(*comm_, op),
                     ": all tensors must have one dtype, got ", dtypeLabel(tensors[0].scalar_type()), " and ",
                     dtypeLabel(t.scalar_type()));
  }
  CoreReduce red = coreReduce(opts.reduceOp, tensors[0].scalar_type(), who(*comm_, op));
  Staging st(who(*comm_, op));
  View v = st.flatten(tensors, /*writeBack=*/true);
  AllreduceOptions o;
  o.buf = v.data;
  o.count = v.count;
  o.dtype = v.dtype;
  o.op = red.op;
  o.premulFactor = red.premulFactor;
  o.timeout = opTimeout(opts.timeout);
  auto w = submit(st, [=, this] { return mccl::allreduce(*comm_, o); });
  return finish(*comm_, OpType::ALLREDUCE_COALESCED, "mccl:all_reduce_coalesced", tensors, tensors,
                {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::broadcast(std::vector<at::Tensor>& tensors,
                                    const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  checkSingle(*comm_, tensors, op);
  checkRoot(*comm_, opts.rootRank, op);
  TORCH_CHECK_VALUE(opts.rootTensor == 0, who(*comm_, op), ": rootTensor must be 0, got ",
                    opts.rootTensor);
  // Not in pieces: on the 2-core CI machine a 64 MiB broadcast in 4 MiB
  // pieces took 10 % longer (each piece's chain fills and drains).
  Staging st(who(*comm_, op));
  View v = st.inout(tensors[0]);
  BroadcastOptions o{v.data, v.count, v.dtype, static_cast<int>(opts.rootRank),
                     opTimeout(opts.timeout)};
  auto w = submit(st, [=, this] { return mccl::broadcast(*comm_, o); });
  return finish(*comm_, OpType::BROADCAST, "mccl:broadcast", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::reduce(std::vector<at::Tensor>& tensors,
                                 const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  checkSingle(*comm_, tensors, op);
  checkRoot(*comm_, opts.rootRank, op);
  TORCH_CHECK_VALUE(opts.rootTensor == 0, who(*comm_, op), ": rootTensor must be 0, got ",
                    opts.rootTensor);
  CoreReduce red = coreReduce(opts.reduceOp, tensors[0].scalar_type(), who(*comm_, op));
  Staging st(who(*comm_, op));
  View v = st.inout(tensors[0]);
  ReduceOptions o;
  o.buf = v.data;
  o.count = v.count;
  o.dtype = v.dtype;
  o.op = red.op;
  o.premulFactor = red.premulFactor;
  o.root = static_cast<int>(opts.rootRank);
  o.timeout = opTimeout(opts.timeout);
  auto w = submit(st, [=, this] { return mccl::reduce(*comm_, o); });
  return finish(*comm_, OpType::REDUCE, "mccl:reduce", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                    std::vector<at::Tensor>& inputs,
                                    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  checkSingle(*comm_, inputs, op);
  TORCH_CHECK_VALUE(outputs.size() == 1, who(*comm_, op), ": expected one output list, got ",
                    outputs.size());
  auto& outs = outputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(outs.size()) == comm_->size(), who(*comm_, op),
                    ": the output list has ", outs.size(), " tensors but the group has ",
                    comm_->size(), " ranks");
  Staging st(who(*comm_, op));
  View in = st.input(inputs[0]);
  AllgatherOptions o;
  o.in = in.data;
  o.count = in.count;
  o.dtype = in.dtype;
  o.timeout = opTimeout(opts.timeout);
  for (auto& t : outs) {
    checkSameAs(*comm_, t, inputs[0], op, "an output tensor");
    o.out.push_back(st.output(t).data);
  }
  auto w = submit(st, [=, this] { return mccl::allgather(*comm_, o); });
  return finish(*comm_, OpType::ALLGATHER, "mccl:all_gather", outs, inputs, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::_allgather_base(at::Tensor& output, at::Tensor& input,
                                          const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor";
  checkTensor(*comm_, input, op);
  checkTensor(*comm_, output, op);
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), who(*comm_, op),
                   ": output dtype ", dtypeLabel(output.scalar_type()), " differs from input dtype ",
                   dtypeLabel(input.scalar_type()));
  TORCH_CHECK_VALUE(output.numel() == input.numel() * comm_->size(), who(*comm_, op),
                    ": output has ", output.numel(), " elements; expected world size ",
                    comm_->size(), " x input's ", input.numel());
  Staging st(who(*comm_, op));
  View in = st.input(input);
  View out = st.output(output);
  AllgatherOptions o;
  o.in = in.data;
  o.count = in.count;
  o.dtype = in.dtype;
  o.out = blocks<void*>(out, comm_->size(), in.count);
  o.timeout = opTimeout(opts.timeout);
  auto w = submit(st, [=, this] { return mccl::allgather(*comm_, o); });
  return finish(*comm_, OpType::_ALLGATHER_BASE, "mccl:_all_gather_base", {output}, {input}, {w},
                std::move(st));
}

WorkPtr ProcessGroupMCCL::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                              std::vector<at::Tensor>& inputs,
                                              const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  TORCH_CHECK_VALUE(outputLists.size() == inputs.size(), who(*comm_, op), ": ",
                    outputLists.size(), " output lists for ", inputs.size(), " inputs");
  std::vector<std::shared_ptr<Work>> core;
  Staging st(who(*comm_, op));
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(*comm_, inputs[i], op);
    TORCH_CHECK_VALUE(static_cast<int>(outputLists[i].size()) == comm_->size(), who(*comm_, op),
                      ": output list ", i, " has ", outputLists[i].size(), " tensors");
    View in = st.input(inputs[i]);
    AllgatherOptions o;
    o.in = in.data;
    o.count = in.count;
    o.dtype = in.dtype;
    o.timeout = opTimeout(opts.timeout);
    for (auto& t : outputLists[i]) {
      checkSameAs(*comm_, t, inputs[i], op, "an output tensor");
      o.out.push_back(st.output(t).data);
      outs.push_back(t);
    }
    core.push_back(submit(st, [=, this] { return mccl::allgather(*comm_, o); }));
  }
  return finish(*comm_, OpType::ALLGATHER_COALESCED, "mccl:all_gather_coalesced", outs, inputs,
                core, std::move(st));
}

WorkPtr ProcessGroupMCCL::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), who(*comm_, op), ": ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<std::shared_ptr<Work>> core;
  Staging st(who(*comm_, op));
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(*comm_, inputs[i], op);
    checkTensor(*comm_, outputs[i], op);
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * comm_->size() &&
                          outputs[i].scalar_type() == inputs[i].scalar_type(),
                      who(*comm_, op), ": output ", i, " must have world size x the input's ",
                      inputs[i].numel(), " elements of ", dtypeLabel(inputs[i].scalar_type()));
    View in = st.input(inputs[i]);
    View out = st.output(outputs[i]);
    AllgatherOptions o;
    o.in = in.data;
    o.count = in.count;
    o.dtype = in.dtype;
    o.out = blocks<void*>(out, comm_->size(), in.count);
    o.timeout = opTimeout(opts.timeout);
    core.push_back(submit(st, [=, this] { return mccl::allgather(*comm_, o); }));
  }
  return finish(*comm_, OpType::COALESCED, "mccl:all_gather_into_tensor_coalesced", outputs,
                inputs, core, std::move(st));
}

WorkPtr ProcessGroupMCCL::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                 std::vector<at::Tensor>& inputs,
                                 const c10d::GatherOptions& opts) {
  const char* op = "gather";
  checkSingle(*comm_, inputs, op);
  checkRoot(*comm_, opts.rootRank, op);
  std::vector<at::Tensor> outs = rootList(*comm_, outputs, opts.rootRank, inputs[0], op, "output");
  Staging st(who(*comm_, op));
  View in = st.input(inputs[0]);
  GatherOptions o;
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
  const char* op = "scatter";
  checkSingle(*comm_, outputs, op);
  checkRoot(*comm_, opts.rootRank, op);
  std::vector<at::Tensor> ins = rootList(*comm_, inputs, opts.rootRank, outputs[0], op, "input");
  Staging st(who(*comm_, op));
  View out = st.output(outputs[0]);
  ScatterOptions o;
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
  const char* op = "reduce_scatter";
  checkSingle(*comm_, outputs, op);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == comm_->size(),
                    who(*comm_, op), ": expected one input list of ", comm_->size(), " tensors");
  CoreReduce red = coreReduce(opts.reduceOp, outputs[0].scalar_type(), who(*comm_, op));
  Staging st(who(*comm_, op));
  View out = st.output(outputs[0]);
  ReduceScatterOptions o;
  o.out = out.data;
  o.count = out.count;
  o.dtype = out.dtype;
  o.op = red.op;
  o.premulFactor = red.premulFactor;
  o.timeout = opTimeout(opts.timeout);
  for (auto& t : inputs[0]) {
    checkSameAs(*comm_, t, outputs[0], op, "an input tensor");
    o.in.push_back(st.input(t).data);
  }
  auto w = submit(st, [=, this] { return mccl::reduceScatter(*comm_, o); });
  return finish(*comm_, OpType::REDUCE_SCATTER, "mccl:reduce_scatter", outputs, inputs[0], {w},
                std::move(st));
}

WorkPtr ProcessGroupMCCL::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                               const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  checkTensor(*comm_, input, op);
  checkTensor(*comm_, output, op);
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), who(*comm_, op),
                   ": output dtype ", dtypeLabel(output.scalar_type()), " differs from input dtype ",
                   dtypeLabel(input.scalar_type()));
  TORCH_CHECK_VALUE(input.numel() == output.numel() * comm_->size(), who(*comm_, op),
                    ": input has ", input.numel(), " elements; expected world size ",
                    comm_->size(), " x output's ", output.numel());
  CoreReduce red = coreReduce(opts.reduceOp, output.scalar_type(), who(*comm_, op));
  Staging st(who(*comm_, op));
  View in = st.input(input);
  View out = st.output(output);
  ReduceScatterOptions o;
  o.out = out.data;
  o.count = out.count;
  o.dtype = out.dtype;
  o.op = red.op;
  o.premulFactor = red.premulFactor;
  o.in = blocks<const void*>(in, comm_->size(), out.count);
  o.timeout = opTimeout(opts.timeout);
  auto w = submit(st, [=, this] { return mccl::reduceScatter(*comm_, o); });
  return finish(*comm_, OpType::_REDUCE_SCATTER_BASE, "mccl:_reduce_scatter_base", {output},
                {input}, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), who(*comm_, op), ": ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  std::vector<std::shared_ptr<Work>> core;
  Staging st(who(*comm_, op));
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(*comm_, inputs[i], op);
    checkTensor(*comm_, outputs[i], op);
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * comm_->size() &&
                          outputs[i].scalar_type() == inputs[i].scalar_type(),
                      who(*comm_, op), ": input ", i, " must have world size x the output's ",
                      outputs[i].numel(), " elements of ", dtypeLabel(outputs[i].scalar_type()));
    CoreReduce red = coreReduce(opts.reduceOp, outputs[i].scalar_type(), who(*comm_, op));
    View in = st.input(inputs[i]);
    View out = st.output(outputs[i]);
    ReduceScatterOptions o;
    o.out = out.data;
    o.count = out.count;
    o.dtype = out.dtype;
    o.op = red.op;
    o.premulFactor = red.premulFactor;
    o.in = blocks<const void*>(in, comm_->size(), out.count);
    o.timeout = opTimeout(opts.timeout);
    core.push_back(submit(st, [=, this] { return mccl::reduceScatter(*comm_, o); }));
  }
  return finish(*comm_, OpType::COALESCED, "mccl:reduce_scatter_tensor_coalesced", outputs,
                inputs, core, std::move(st));
}

WorkPtr ProcessGroupMCCL::alltoall_base(at::Tensor& output, at::Tensor& input,
                                        std::vector<int64_t>& outputSplitSizes,
                                        std::vector<int64_t>& inputSplitSizes,
                                        const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  checkTensor(*comm_, input, op);
  checkTensor(*comm_, output, op);
  TORCH_CHECK_TYPE(output.scalar_type() == input.scalar_type(), who(*comm_, op),
                   ": output dtype ", dtypeLabel(output.scalar_type()), " differs from input dtype ",
                   dtypeLabel(input.scalar_type()));
  const int n = comm_->size();
  // Splits are in rows of dim 0; none given means equal splits.
  auto rowsOf = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<int64_t> rows;
    int64_t dim0 = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      TORCH_CHECK_VALUE(dim0 % n == 0, who(*comm_, op), ": ", what, " has ", dim0,
                        " rows, which do not split evenly over ", n, " ranks; pass split sizes");
      rows.assign(static_cast<size_t>(n), dim0 / n);
    } else {
      TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == n, who(*comm_, op), ": ", what,
                        " split sizes have ", splits.size(), " entries for ", n, " ranks");
      int64_t sum = 0;
      for (int64_t s : splits) {
        TORCH_CHECK_VALUE(s >= 0, who(*comm_, op), ": negative ", what, " split size ", s);
        sum += s;
      }
      TORCH_CHECK_VALUE(sum == dim0, who(*comm_, op), ": ", what, " split sizes sum to ", sum,
                        " but the tensor has ", dim0, " rows");
      rows = splits;
    }
    return rows;
  };
  auto inRows = rowsOf(input, inputSplitSizes, "input");
  auto outRows = rowsOf(output, outputSplitSizes, "output");
  const int64_t inRow = input.dim() == 0 || input.size(0) == 0 ? 0 : input.numel() / input.size(0);
  const int64_t outRow = output.dim() == 0 || output.size(0) == 0 ? 0 : output.numel() / output.size(0);
  Staging st(who(*comm_, op));
  View in = st.input(input);
  View out = st.output(output);
  const size_t per = in.count / std::max<size_t>(1, static_cast<size_t>(input.numel()));
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
  const char* op = "alltoall";
  const int n = comm_->size();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
                    who(*comm_, op), ": expected ", n, " input and output tensors, got ",
                    inputs.size(), " and ", outputs.size());
  Staging st(who(*comm_, op));
  AlltoallOptions o;
  o.timeout = opTimeout(opts.timeout);
  for (int p = 0; p < n; ++p) {
    checkTensor(*comm_, inputs[static_cast<size_t>(p)], op);
    checkTensor(*comm_, outputs[static_cast<size_t>(p)], op);
    TORCH_CHECK_TYPE(inputs[static_cast<size_t>(p)].scalar_type() == inputs[0].scalar_type() &&
                         outputs[static_cast<size_t>(p)].scalar_type() == inputs[0].scalar_type(),
                     who(*comm_, op), ": all tensors must have dtype ", dtypeLabel(inputs[0].scalar_type()));
    View in = st.input(inputs[static_cast<size_t>(p)]);
    View out = st.output(outputs[static_cast<size_t>(p)]);
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
  const char* op = "send";
  checkSingle(*comm_, tensors, op);
  TORCH_CHECK_VALUE(tag >= 0, who(*comm_, op), ": tag must be non-negative, got ", tag);
  Staging st(who(*comm_, op));
  View v = st.input(tensors[0]);
  auto w = submit(st, [=, this] {
    return mccl::send(*comm_, dstRank, static_cast<uint32_t>(tag), v.data, v.count, v.dtype);
  });
  return finish(*comm_, OpType::SEND, "mccl:send", tensors, tensors, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  const char* op = "recv";
  checkSingle(*comm_, tensors, op);
  TORCH_CHECK_VALUE(tag >= 0, who(*comm_, op), ": tag must be non-negative, got ", tag);
  Staging st(who(*comm_, op));
  View v = st.output(tensors[0]);
  auto w = submit(st, [=, this] {
    return mccl::recv(*comm_, srcRank, static_cast<uint32_t>(tag), v.data, v.count, v.dtype);
  });
  return finish(*comm_, OpType::RECV, "mccl:recv", tensors, {}, {w}, std::move(st));
}

WorkPtr ProcessGroupMCCL::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const char* op = "recv";
  checkSingle(*comm_, tensors, op);
  TORCH_CHECK_VALUE(tag >= 0, who(*comm_, op), ": tag must be non-negative, got ", tag);
  Staging st(who(*comm_, op));
  View v = st.output(tensors[0]);
  auto w = submit(st, [=, this] {
    return mccl::recv(*comm_, Communicator::kAnySource, static_cast<uint32_t>(tag), v.data,
                      v.count, v.dtype);
  });
  return finish(*comm_, OpType::RECVANYSOURCE, "mccl:recv_any_source", tensors, {}, {w},
                std::move(st));
}

WorkPtr ProcessGroupMCCL::barrier(const c10d::BarrierOptions& opts) {
  Staging st(who(*comm_, "barrier"));
  auto w = submit(st, [=, this] { return mccl::barrier(*comm_, opTimeout(opts.timeout)); });
  return finish(*comm_, OpType::BARRIER, "mccl:barrier", {}, {}, {w}, std::move(st));
}

}  // namespace mccl::torch_adapter
