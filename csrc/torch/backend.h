// ProcessGroupMCCL: the c10d Backend for backend="mccl".
//
// A thin adapter: it checks every c10d argument of a call (args.h) before
// anything is staged or sent, turns tensors into (pointer, count, dtype)
// views (staging non-contiguous and device ones), calls the core collective,
// and returns a WorkMCCL whose Future completes with the output tensors.
//
// Threads: every method runs on the caller's thread and does not wait for the
// network. A small collective on an idle group may start there (the core's
// submit() posts its first frames without blocking); others are started by
// the communicator's engine thread, and ops whose device inputs are still
// being copied go through the submit thread (submit_queue.h) in call order.
#pragma once

#include <atomic>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "submit_queue.h"
#include "work.h"

// c10d::Backend made abort() and shutdown() virtual in torch 2.7 and
// setTimeout() in 2.9; before, they are MCCL's own
// methods (then destroy_process_group / _set_default_timeout do not reach them).
#define MCCL_TORCH_AT_LEAST(minor) \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= (minor)))
#if MCCL_TORCH_AT_LEAST(7)
#define MCCL_OVERRIDE_SINCE_2_7 override
#else
#define MCCL_OVERRIDE_SINCE_2_7
#endif
#if MCCL_TORCH_AT_LEAST(9)
#define MCCL_OVERRIDE_SETTIMEOUT override
#else
#define MCCL_OVERRIDE_SETTIMEOUT
#endif

namespace mccl::torch_adapter {

class ProcessGroupMCCL : public c10d::Backend {
 public:
  // Collective over the ranks of the group: rendezvous through `store`.
  // `routeHost` is the master address, used to pick the default interface.
  // `settings`: this group's own values of settings (mccl.Options, by
  // variable name) over the MCCL_* environment.
  ProcessGroupMCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout, std::string groupName,
                   std::string routeHost, const std::map<std::string, std::string>& settings = {});
  // The group shrink() made: `comm` is already running.
  ProcessGroupMCCL(std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout);
  ~ProcessGroupMCCL() override;

  const std::string getBackendName() const override { return "mccl"; }

#ifdef MCCL_TORCH_HAS_SHRINK
  // torch.distributed.shrink_group: the survivors' group over this group's
  // connections and ports (Communicator::shrink). shrink_flags: 0
  // (SHRINK_DEFAULT: pending ops must finish) or 1 (SHRINK_ABORT: they
  // fail at once). Backend options are not taken (settings are MCCL_*).
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude,
                                           int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& optsOverride) override;
#endif

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void setTimeout(std::chrono::milliseconds timeout) MCCL_OVERRIDE_SETTIMEOUT;
  void abort() MCCL_OVERRIDE_SINCE_2_7;
  void shutdown() MCCL_OVERRIDE_SINCE_2_7;

  Communicator& comm() { return *comm_; }
  // "host:port" this rank listens on.
  // What an all_reduce (SUM), broadcast or reduce (SUM) of `t` runs here:
  // the algorithm (a wire algorithm too) the group's model and settings choose,
  // and, for an all_reduce in pieces, per piece. For mccl-bench.
  std::string algorithmFor(const std::string& op, const at::Tensor& t) const;
  // Elements per piece of an all_reduce of `nbytes` in elements of
  // `elementSize` bytes with MCCL_PIECE_BYTES `pieceBytes` (a multiple of
  // 256), or 0 when it runs whole: below two pieces' worth, or pieces off.
  static size_t pieceElementsFor(size_t pieceBytes, size_t nbytes, size_t elementSize);
  std::string address() const;

 private:
  std::chrono::milliseconds opTimeout(std::chrono::milliseconds requested) const;

  // Hands `fn`'s core op to the core now, or (device inputs still being
  // staged, or earlier ops queued) through queue_ in call order.
  template <typename F>
  std::shared_ptr<Work> submit(Staging& st, F&& fn);
  // Elements per piece of an all_reduce of `t` (MCCL_PIECE_BYTES), or 0
  // when it runs whole.
  size_t pieceElements(const at::Tensor& t) const;
  // Runs the op on consecutive pieces of `t` (contiguous), one core op each
  // (`makeOp(view)` returns the submit body); device pieces are staged and
  // copied back one by one, overlapping the network.
  template <typename MakeOp>
  c10::intrusive_ptr<c10d::Work> runInPieces(at::Tensor& t, c10d::OpType type, const char* title,
                                             const std::string& who, MakeOp&& makeOp);

  std::shared_ptr<Communicator> comm_;
  SubmitQueue queue_;
  // setTimeout() may run while other threads issue ops.
  std::atomic<std::chrono::milliseconds> timeout_;
};

}  // namespace mccl::torch_adapter
