#include "c10d_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/library.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>

namespace mccl::torch_adapter {
namespace {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

// One call's arguments, read by name from the op's schema.
class Args {
 public:
  Args(const c10::FunctionSchema& schema, const torch::jit::Stack& stack)
      : schema_(schema), stack_(stack), first_(stack.size() - schema.arguments().size()) {}

  bool has(const char* name) const { return schema_.argumentIndexWithName(name).has_value(); }
  const c10::IValue& at(const char* name) const {
    auto i = schema_.argumentIndexWithName(name);
    TORCH_CHECK(i.has_value(), "mccl's kernel for ", schema_.name(), " needs an argument named '",
                name, "', which this torch's schema lacks: ", schema_);
    return stack_[first_ + *i];
  }
  at::Tensor tensor(const char* name) const { return at(name).toTensor(); }
  Tensors tensors(const char* name) const { return at(name).toTensorVector(); }
  TensorLists tensorLists(const char* name) const {
    TensorLists out;
    for (const c10::IValue& inner : at(name).toListRef()) out.push_back(inner.toTensorVector());
    return out;
  }
  int64_t integer(const char* name) const { return at(name).toInt(); }
  std::vector<int64_t> ints(const char* name) const { return at(name).toIntVector(); }
  std::optional<at::Tensor> optionalTensor(const char* name) const {
    if (!has(name) || at(name).isNone()) return std::nullopt;
    return at(name).toTensor();
  }
  c10::intrusive_ptr<c10d::ProcessGroup> group() const {
    return at("process_group").toCustomClass<c10d::ProcessGroup>();
  }
  c10d::ReduceOp reduceOp() const { return *at("reduce_op").toCustomClass<c10d::ReduceOp>(); }
  // Absent before 2.8 on most ops (c10d then ran them asynchronously).
  bool asyncOp() const {
    if (has("async_op")) return at("async_op").toBool();
    if (has("asyncOp")) return at("asyncOp").toBool();
    return true;
  }
  std::chrono::milliseconds timeout() const {
    return has("timeout") ? std::chrono::milliseconds(integer("timeout")) : c10d::kUnsetTimeout;
  }

 private:
  const c10::FunctionSchema& schema_;
  const torch::jit::Stack& stack_;
  size_t first_;
};

// Options structs gained fields over versions; set those this torch has.
template <typename O>
O options(const Args& a) {
  O o{};
  if constexpr (requires { o.timeout; }) o.timeout = a.timeout();
  if constexpr (requires { o.asyncOp; }) o.asyncOp = a.asyncOp();
  return o;
}

c10::intrusive_ptr<c10d::Backend> backendFor(const Args& a, const at::Tensor& t) {
  return a.group()->getBackend(t.device().type());
}

const at::Tensor& firstOf(const Tensors& ts, const char* op) {
  TORCH_CHECK_VALUE(!ts.empty(), "c10d::", op, ": no tensors");
  return ts.front();
}

// What a handler returns: the Work, and the argument whose value the op
// returns beside it (c10d's kernels return their output tensors).
struct Result {
  WorkPtr work;
  const char* returned = nullptr;
};
using Handler = std::function<Result(const Args&)>;

const std::map<std::string, Handler>& handlers() {
  static const std::map<std::string, Handler> table = {
      {"allreduce_",
       [](const Args& a) {
         Tensors ts = a.tensors("tensors");
         auto o = options<c10d::AllreduceOptions>(a);
         o.reduceOp = a.reduceOp();
         if constexpr (requires { o.sparseIndices; }) o.sparseIndices = a.optionalTensor("sparse_indices");
         return Result{backendFor(a, firstOf(ts, "allreduce_"))->allreduce(ts, o), "tensors"};
       }},
      {"allreduce_coalesced_",
       [](const Args& a) {
         Tensors ts = a.tensors("tensors");
         auto o = options<c10d::AllreduceCoalescedOptions>(a);
         o.reduceOp = a.reduceOp();
         return Result{backendFor(a, firstOf(ts, "allreduce_coalesced_"))->allreduce_coalesced(ts, o)};
       }},
      {"broadcast_",
       [](const Args& a) {
         Tensors ts = a.tensors("tensors");
         auto o = options<c10d::BroadcastOptions>(a);
         o.rootRank = a.integer("root_rank");
         o.rootTensor = a.integer("root_tensor");
         return Result{backendFor(a, firstOf(ts, "broadcast_"))->broadcast(ts, o), "tensors"};
       }},
      {"reduce_",
       [](const Args& a) {
         Tensors ts = a.tensors("tensors");
         auto o = options<c10d::ReduceOptions>(a);
         o.reduceOp = a.reduceOp();
         o.rootRank = a.integer("root_rank");
         o.rootTensor = a.integer("root_tensor");
         return Result{backendFor(a, firstOf(ts, "reduce_"))->reduce(ts, o)};
       }},
      {"allgather_",
       [](const Args& a) {
         TensorLists out = a.tensorLists("output_tensors");
         Tensors in = a.tensors("input_tensors");
         auto o = options<c10d::AllgatherOptions>(a);
         return Result{backendFor(a, firstOf(in, "allgather_"))->allgather(out, in, o), "output_tensors"};
       }},
      {"_allgather_base_",
       [](const Args& a) {
         at::Tensor out = a.tensor("output_tensor");
         at::Tensor in = a.tensor("input_tensor");
         auto o = options<c10d::AllgatherOptions>(a);
         return Result{backendFor(a, in)->_allgather_base(out, in, o), "output_tensor"};
       }},
      {"allgather_coalesced_",
       [](const Args& a) {
         TensorLists out = a.tensorLists("output_lists");
         Tensors in = a.tensors("input_list");
         auto o = options<c10d::AllgatherOptions>(a);
         return Result{backendFor(a, firstOf(in, "allgather_coalesced_"))->allgather_coalesced(out, in, o)};
       }},
      {"allgather_into_tensor_coalesced_",
       [](const Args& a) {
         Tensors out = a.tensors("outputs");
         Tensors in = a.tensors("inputs");
         auto o = options<c10d::AllgatherOptions>(a);
         return Result{backendFor(a, firstOf(in, "allgather_into_tensor_coalesced_"))
                           ->allgather_into_tensor_coalesced(out, in, o)};
       }},
      {"reduce_scatter_",
       [](const Args& a) {
         Tensors out = a.tensors("output_tensors");
         TensorLists in = a.tensorLists("input_tensors");
         auto o = options<c10d::ReduceScatterOptions>(a);
         o.reduceOp = a.reduceOp();
         return Result{backendFor(a, firstOf(out, "reduce_scatter_"))->reduce_scatter(out, in, o),
                       "output_tensors"};
       }},
      {"_reduce_scatter_base_",
       [](const Args& a) {
         at::Tensor out = a.tensor("output_tensor");
         at::Tensor in = a.tensor("input_tensor");
         auto o = options<c10d::ReduceScatterOptions>(a);
         o.reduceOp = a.reduceOp();
         return Result{backendFor(a, in)->_reduce_scatter_base(out, in, o), "output_tensor"};
       }},
      {"reduce_scatter_tensor_coalesced_",
       [](const Args& a) {
         Tensors out = a.tensors("outputs");
         Tensors in = a.tensors("inputs");
         auto o = options<c10d::ReduceScatterOptions>(a);
         o.reduceOp = a.reduceOp();
         return Result{backendFor(a, firstOf(in, "reduce_scatter_tensor_coalesced_"))
                           ->reduce_scatter_tensor_coalesced(out, in, o)};
       }},
      {"gather_",
       [](const Args& a) {
         TensorLists out = a.tensorLists("output_tensors");
         Tensors in = a.tensors("input_tensors");
         auto o = options<c10d::GatherOptions>(a);
         o.rootRank = a.integer("root_rank");
         return Result{backendFor(a, firstOf(in, "gather_"))->gather(out, in, o)};
       }},
      {"scatter_",
       [](const Args& a) {
         Tensors out = a.tensors("output_tensors");
         TensorLists in = a.tensorLists("input_tensors");
         auto o = options<c10d::ScatterOptions>(a);
         o.rootRank = a.integer("root_rank");
         return Result{backendFor(a, firstOf(out, "scatter_"))->scatter(out, in, o), "output_tensors"};
       }},
      {"alltoall_",
       [](const Args& a) {
         Tensors out = a.tensors("output_tensors");
         Tensors in = a.tensors("input_tensors");
         auto o = options<c10d::AllToAllOptions>(a);
         return Result{backendFor(a, firstOf(in, "alltoall_"))->alltoall(out, in, o), "output_tensors"};
       }},
      {"alltoall_base_",
       [](const Args& a) {
         at::Tensor out = a.tensor("output");
         at::Tensor in = a.tensor("input");
         std::vector<int64_t> outSplits = a.ints("output_split_sizes");
         std::vector<int64_t> inSplits = a.ints("input_split_sizes");
         auto o = options<c10d::AllToAllOptions>(a);
         return Result{backendFor(a, in)->alltoall_base(out, in, outSplits, inSplits, o)};
       }},
      {"barrier",
       [](const Args& a) {
         auto o = options<c10d::BarrierOptions>(a);
         o.device_ids = a.ints("device_ids");
         return Result{backendFor(a, a.tensor("tensor"))->barrier(o)};
       }},
      {"send",
       [](const Args& a) {
         Tensors ts = a.tensors("tensors");
         return Result{backendFor(a, firstOf(ts, "send"))
                           ->send(ts, static_cast<int>(a.integer("dst")), static_cast<int>(a.integer("tag")))};
       }},
      {"recv_",
       [](const Args& a) {
         Tensors ts = a.tensors("tensors");
         return Result{backendFor(a, firstOf(ts, "recv_"))
                           ->recv(ts, static_cast<int>(a.integer("src")), static_cast<int>(a.integer("tag")))};
       }},
      {"recv_any_source_",
       [](const Args& a) {
         Tensors ts = a.tensors("tensors");
         return Result{backendFor(a, firstOf(ts, "recv_any_source_"))
                           ->recvAnysource(ts, static_cast<int>(a.integer("tag")))};
       }},
  };
  return table;
}

std::string baseName(const std::string& qualified) {
  auto at = qualified.rfind("::");
  return at == std::string::npos ? qualified : qualified.substr(at + 2);
}

// The one boxed kernel: finds the op's handler by name, calls it, and
// replaces the arguments on the stack with the op's returns.
void boxedKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  auto it = handlers().find(baseName(schema.name()));
  TORCH_CHECK(it != handlers().end(), "mccl has no kernel for ", schema.name());
  Result r = it->second(Args(schema, *stack));
  c10::IValue returned = r.returned ? Args(schema, *stack).at(r.returned) : c10::IValue();
  torch::jit::drop(*stack, schema.arguments().size());
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.type()->kind() == c10::TypeKind::ClassType) {
      torch::jit::push(*stack, c10::IValue(r.work));
    } else {
      TORCH_CHECK(r.returned != nullptr, "mccl's kernel for ", schema.name(),
                  " has no value for return ", ret.type()->str());
      torch::jit::push(*stack, returned);
    }
  }
}

}  // namespace

const std::vector<std::string>& boxedC10dOpNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, handler] : handlers()) out.push_back(name);
    return out;
  }();
  return names;
}

std::vector<std::string> registerBoxedC10dKernels(const std::string& ns, c10::DispatchKey key) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::string> todo;
  for (const std::string& name : boxedC10dOpNames()) {
    auto op = c10::Dispatcher::singleton().findOp(c10::OperatorName(ns + "::" + name, ""));
    if (op && !op->hasKernelForDispatchKey(key)) todo.push_back(name);
  }
  if (todo.empty()) return todo;
  // Lives as long as the process: the kernels must outlive every caller.
  auto* lib = new torch::Library(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
  for (const std::string& name : todo) {
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&boxedKernel>());
  }
  return todo;
}

namespace {
std::vector<std::string>& mpsRegistered() {
  static std::vector<std::string> names;
  return names;
}
}  // namespace

std::vector<std::string> registerMpsKernels() {
  auto names = registerBoxedC10dKernels("c10d", c10::DispatchKey::MPS);
  auto& all = mpsRegistered();
  all.insert(all.end(), names.begin(), names.end());
  return names;
}

const std::vector<std::string>& registeredMpsKernels() { return mpsRegistered(); }

}  // namespace mccl::torch_adapter
