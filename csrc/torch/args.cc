#include "args.h"

#include <c10/util/Exception.h>

#include "algo/collectives.h"
#include "comm/p2p.h"

namespace mccl::torch_adapter {

std::string at(const std::string& name, size_t i) { return strCat(name, "[", i, "]"); }
std::string at(const std::string& name, size_t i, size_t j) {
  return strCat(name, "[", i, "][", j, "]");
}

Args::Args(const Communicator& comm, const char* op)
    : comm_(comm),
      op_(op),
      who_(strCat("mccl ", op, " (rank ", comm.rank(), "/", comm.size(), ", group '",
                  comm.config().groupName, "')")) {}

void Args::tensor(const at::Tensor& t, const std::string& what) const {
  TORCH_CHECK_VALUE(t.defined(), who_, ": ", what, " is an undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, who_, ": ", t.layout(), " tensors are not supported (",
                    what, "); use dense (strided) tensors");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda() || t.device().is_mps(), who_,
                    ": ", what, " is on ", t.device(), "; mccl takes CPU, CUDA and MPS tensors");
}

void Args::single(const std::vector<at::Tensor>& ts, const std::string& what) const {
  TORCH_CHECK_VALUE(ts.size() == 1, who_, ": expected one tensor in ", what, ", got ", ts.size());
  tensor(ts[0], what);
}

void Args::nonEmpty(const std::vector<at::Tensor>& ts, const std::string& what) const {
  TORCH_CHECK_VALUE(!ts.empty(), who_, ": ", what, " is empty");
}

void Args::perRank(const std::vector<at::Tensor>& ts, const std::string& what) const {
  TORCH_CHECK_VALUE(static_cast<int>(ts.size()) == size(), who_, ": the ", what, " has ", ts.size(),
                    " tensors but the group has ", size(), " ranks");
}

void Args::sameDtype(const at::Tensor& t, const std::string& what, const at::Tensor& ref,
                     const std::string& refWhat) const {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), who_, ": ", what, " has dtype ",
                   dtypeLabel(t.scalar_type()), " but ", refWhat, " has ",
                   dtypeLabel(ref.scalar_type()));
}

void Args::like(const at::Tensor& t, const std::string& what, const at::Tensor& ref,
                const std::string& refWhat, bool timesWorld) const {
  tensor(t, what);
  sameDtype(t, what, ref, refWhat);
  if (timesWorld) {
    TORCH_CHECK_VALUE(t.numel() == ref.numel() * size(), who_, ": ", what, " has ", t.numel(),
                      " elements; expected world size ", size(), " x ", refWhat, "'s ", ref.numel());
  } else {
    TORCH_CHECK_VALUE(t.numel() == ref.numel(), who_, ": ", what, " has ", t.numel(),
                      " elements but ", refWhat, " has ", ref.numel());
  }
}

void Args::pairs(size_t outputs, size_t inputs) const {
  TORCH_CHECK_VALUE(outputs == inputs, who_, ": ", outputs, " output tensors for ", inputs,
                    " inputs; they pair up one to one");
}

void Args::root(int64_t rootRank, int64_t rootTensor) const {
  const std::string why = rootRefusal(size(), rootRank);
  TORCH_CHECK_VALUE(why.empty(), who_, ": ", why);
  TORCH_CHECK_VALUE(rootTensor == 0, who_, ": rootTensor must be 0, got ", rootTensor);
}

void Args::peer(int rank, const char* what) const {
  const std::string why = peerRefusal(size(), this->rank(), rank, what);
  TORCH_CHECK_VALUE(why.empty(), who_, ": ", why);
}

void Args::tag(int tag) const {
  TORCH_CHECK_VALUE(tag >= 0, who_, ": tag must be non-negative, got ", tag);
}

CoreReduce Args::reduce(const c10d::ReduceOp& op, at::ScalarType type) const {
  return coreReduce(op, type, who_);
}

std::vector<at::Tensor> Args::rootList(const std::vector<std::vector<at::Tensor>>& lists,
                                       int64_t rootRank, const at::Tensor& ref, const char* what) const {
  if (rank() != rootRank) {
    TORCH_CHECK_VALUE(lists.empty() || (lists.size() == 1 && lists[0].empty()), who_,
                      ": only the root (rank ", rootRank, ") takes ", what, " tensors");
    return {};
  }
  TORCH_CHECK_VALUE(lists.size() == 1 && static_cast<int>(lists[0].size()) == size(), who_,
                    ": the root needs one ", what, " list of ", size(), " tensors, got ",
                    lists.size() == 1 ? strCat(lists[0].size(), " tensors") : strCat(lists.size(), " lists"));
  for (const auto& t : lists[0]) like(t, strCat("an ", what, " tensor"), ref, "the input");
  return lists[0];
}

}  // namespace mccl::torch_adapter
