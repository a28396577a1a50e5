// Argument checks of the c10d adapter: the one home of every check on what a
// torch.distributed call passes (tensors, lists, roots, tags, reduce ops).
//
// Every ProcessGroupMCCL override runs all of its checks before it stages
// or submits anything, so a bad argument anywhere in a call (the k-th tensor
// of a coalesced batch too) leaves the group untouched and usable. Each
// check throws ValueError or TypeError naming the op, this rank, the
// argument (as torch names it) and the sizes. Checks that the core also
// makes (roots, point-to-point peers, reduce op × dtype) take their wording
// from the core's rootRefusal(), peerRefusal() and reduceRefusal().
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "dtypes.h"

namespace mccl::torch_adapter {

class Args {
 public:
  Args(const Communicator& comm, const char* op);

  // "mccl allgather (rank 1/4, group 'default_pg')"
  const std::string& who() const { return who_; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }

  // A dense tensor on a device mccl serves (`what`: "input_tensor_list[2]").
  void tensor(const at::Tensor& t, const std::string& what) const;
  // Exactly one tensor (c10d's single-tensor list), checked as `what`.
  void single(const std::vector<at::Tensor>& ts, const std::string& what) const;
  void nonEmpty(const std::vector<at::Tensor>& ts, const std::string& what) const;
  // `ts` holds one tensor per rank of the group.
  void perRank(const std::vector<at::Tensor>& ts, const std::string& what) const;
  // `t` is a tensor with `ref`'s dtype (TypeError) and as many elements
  // (ValueError), or world size times as many with `timesWorld`.
  void like(const at::Tensor& t, const std::string& what, const at::Tensor& ref,
            const std::string& refWhat, bool timesWorld = false) const;
  void sameDtype(const at::Tensor& t, const std::string& what, const at::Tensor& ref,
                 const std::string& refWhat) const;
  // Two lists that pair up one to one (coalesced outputs and inputs).
  void pairs(size_t outputs, size_t inputs) const;
  void root(int64_t rootRank, int64_t rootTensor) const;
  void tag(int tag) const;
  // A send's destination or a receive's source (`what`): a rank of the
  // group other than this one. Checked here so that device tensors, whose
  // ops reach the core later, are refused at the call like host ones.
  void peer(int rank, const char* what) const;
  // The core's reduce op for `op` on `type`; TypeError when it cannot apply.
  CoreReduce reduce(const c10d::ReduceOp& op, at::ScalarType type) const;
  // gather's outputs / scatter's inputs (`what`: "output" / "input"): the
  // root passes one list of a tensor per rank, each like `ref` (the input's
  // elements); the others pass none (or one empty list). Returns the root's
  // list, empty elsewhere.
  std::vector<at::Tensor> rootList(const std::vector<std::vector<at::Tensor>>& lists,
                                   int64_t rootRank, const at::Tensor& ref, const char* what) const;

 private:
  const Communicator& comm_;
  const char* op_;
  std::string who_;
};

// "name[i]" / "name[i][j]"
std::string at(const std::string& name, size_t i);
std::string at(const std::string& name, size_t i, size_t j);

}  // namespace mccl::torch_adapter
