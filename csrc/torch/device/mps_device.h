// MPS tensors (Apple Silicon): DeviceOps over a MetalPort.
//
// Only the thread that submits an op touches PyTorch's MPS stream: there it
// encodes a signal of MCCL's shared event (the fence) after everything
// queued so far. MCCL's threads never call into PyTorch's MPS runtime: they
// wait for event values and touch raw memory or MCCL's own command queue.
//   - Shared storage (CPU-visible): the core reads and writes the tensor's
//     memory in place once the fence has passed (zero copy).
//   - Private storage: blits on MCCL's own queue copy to and from Shared
//     buffers MCCL owns; the first blit waits (on the GPU) for the fence.
// Completion waits on the host for MCCL's copies and then completes Work and
// a device-less Future (so DDP's future->wait() sees final values).
//
// The Metal calls sit behind MetalPort: mps_metal.mm implements it on macOS;
// fake_mps.cc implements it on Linux for tests (a serial fake "stream",
// delayed kernels and blits, poisoned buffers, and a count of fence calls
// made from MCCL's threads).
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "device/device.h"

namespace mccl::torch_adapter {

// Commits on PyTorch's MPS stream per fence. PyTorch keeps a compute encoder
// open across kernels (kernel coalescing); a signal cannot be encoded while
// it is. From torch 2.10, torch::mps::get_command_buffer() ends that encoder
// before returning the buffer (pytorch/pytorch#164093, fixing #163721), so
// the fence encodes its signal and commits once; before, it commits first
// (which ends the encoder), then signals and commits again.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
inline constexpr int kFenceCommits = 1;
#else
inline constexpr int kFenceCommits = 2;
#endif

class MetalPort {
 public:
  virtual ~MetalPort() = default;
  // Op's calling thread only: PyTorch's MPS stream signals the returned
  // value on the fence event once everything queued before it has run.
  virtual uint64_t fence() = 0;
  // Any thread: the fence event's value.
  virtual uint64_t fenceValue() const = 0;
  // CPU address of `t`'s first element when its memory is CPU-visible
  // (Shared storage); nullptr when it is Private.
  virtual void* cpuAddress(const at::Tensor& t) = 0;
  // A contiguous CPU tensor shaped like `dev`, in a Shared buffer MCCL owns
  // (pooled: staging_pool.h).
  virtual at::Tensor sharedLike(const at::Tensor& dev) = 0;
  // One command buffer on MCCL's own queue (one commit): after the fence has
  // reached `after`, every copy of `batch` in order. Device-bound copies read
  // `host` (contiguous: from sharedLike, or other CPU memory); host-bound ones
  // write it (from sharedLike). `dev` is contiguous. Returns the value MCCL's
  // copy event reaches when the batch is done; values are handed out in the
  // order batches are queued (from the caller's and from MCCL's threads).
  struct Copy {
    at::Tensor host;
    at::Tensor dev;
    bool toDevice = false;
  };
  virtual uint64_t copies(const std::vector<Copy>& batch, uint64_t after) = 0;
  // Any thread: MCCL's copy event's value.
  virtual uint64_t copyValue() const = 0;
  // What the port has done so far (tests and `mccl selftest` count them).
  struct Stats {
    uint64_t fences = 0;              // fence() calls
    uint64_t streamCommits = 0;       // commits on PyTorch's MPS stream
    uint64_t queueCommits = 0;        // command buffers committed on MCCL's queue
    uint64_t bufferAllocations = 0;   // staging buffers allocated (not reused)
  };
  virtual Stats stats() const = 0;
};

// DeviceOps for one op on `device`, through `port` (shared by every op).
std::shared_ptr<DeviceOps> makeMpsDeviceOps(std::shared_ptr<MetalPort> port, c10::Device device);

// The process's Metal port (mps_metal.mm on macOS); throws naming `who`
// where MPS is not available (every other platform).
std::shared_ptr<MetalPort> metalPort(const std::string& who);
// Whether this build has the Metal port (mps_metal.mm, macOS) or the stub.
bool metalPortCompiled();

}  // namespace mccl::torch_adapter
