// The Metal side of the MPS adapter: MetalPort on macOS (Objective-C++, ARC).
//
// NOT YET RUN ON A MAC: written from PyTorch's sources and Apple's Metal
// documentation (see ../shared/design/MPS.md and docs/architecture.md); the
// ordering around it is tested on Linux through fake_mps.cc.
//
// - fence(): on the op's calling thread, inside PyTorch's MPS dispatch
//   queue: encode a signal of MCCL's fence event on the stream's command
//   buffer and commit (before torch 2.10, commit first to end PyTorch's open
//   encoder: kFenceCommits in mps_device.h). The pieces of one op share one
//   fence (OneOpScope).
// - copies: MCCL's own MTLCommandQueue; each command buffer waits for its
//   fence value, blits, and signals MCCL's copy event.
// - memory: a tensor's storage data pointer is its id<MTLBuffer> (PyTorch's
//   getMTLBufferStorage); Shared buffers are read and written by the CPU in
//   place, Private ones through blits into Shared buffers MCCL owns (pooled:
//   staging_pool.h), one command buffer per batch of an op's copies.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/mps.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "device/mps_device.h"
#include "device/staging_pool.h"

namespace mccl::torch_adapter {
namespace {

// PyTorch's MPS allocator stores the id<MTLBuffer> as the storage's data
// pointer (ATen/native/mps/OperationUtils.h, getMTLBufferStorage).
id<MTLBuffer> bufferOf(const at::Tensor& t) {
  id<MTLBuffer> b = __builtin_bit_cast(id<MTLBuffer>, t.storage().data());
  TORCH_CHECK(b != nil && [(id)b conformsToProtocol:@protocol(MTLBuffer)],
              "mccl: the MPS tensor's storage is not an MTLBuffer (a torch newer than mccl knows?)");
  return b;
}

size_t offsetOf(const at::Tensor& t) {
  return static_cast<size_t>(t.storage_offset()) * t.element_size();
}

class MetalPortImpl final : public MetalPort {
 public:
  MetalPortImpl() {
    device_ = MTLCreateSystemDefaultDevice();
    TORCH_CHECK(device_ != nil, "mccl: no Metal device");
    queue_ = [device_ newCommandQueue];
    fenceEvent_ = [device_ newSharedEvent];
    copyEvent_ = [device_ newSharedEvent];
    id<MTLDevice> dev = device_;
    pool_ = std::make_shared<StagingPool>(
        [dev](size_t bytes, void** cpu) {
          id<MTLBuffer> b = [dev newBufferWithLength:bytes options:MTLResourceStorageModeShared];
          TORCH_CHECK(b != nil, "mccl: could not allocate a ", bytes, "-byte shared Metal buffer");
          *cpu = b.contents;
          // The handle owns one retain of the buffer.
          return std::shared_ptr<void>((__bridge_retained void*)b, [](void* p) {
            id<MTLBuffer> owned = (__bridge_transfer id<MTLBuffer>)p;  // released here
            (void)owned;
          });
        },
        kIdleStagingBytes);
  }

  uint64_t fence() override {
    std::lock_guard<std::mutex> lock(fenceMu_);
    const uint64_t v = ++fences_;
    id<MTLSharedEvent> ev = fenceEvent_;
    dispatch_sync(torch::mps::get_dispatch_queue(), ^{
      if constexpr (kFenceCommits == 2) torch::mps::commit();  // ends PyTorch's open encoder
      id<MTLCommandBuffer> cb = torch::mps::get_command_buffer();
      [cb encodeSignalEvent:ev value:v];
      torch::mps::commit();
    });
    streamCommits_ += kFenceCommits;
    return v;
  }
  uint64_t fenceValue() const override { return fenceEvent_.signaledValue; }

  void* cpuAddress(const at::Tensor& t) override {
    id<MTLBuffer> b = bufferOf(t);
    if (b.storageMode != MTLStorageModeShared) return nullptr;
    return static_cast<char*>(b.contents) + offsetOf(t);
  }

  at::Tensor sharedLike(const at::Tensor& dev) override { return pool_->tensorLike(dev); }

  uint64_t copies(const std::vector<Copy>& batch, uint64_t after) override {
    std::lock_guard<std::mutex> lock(queueMu_);  // values in commit order
    id<MTLCommandBuffer> cb = [queue_ commandBuffer];
    [cb encodeWaitForEvent:fenceEvent_ value:after];
    id<MTLBlitCommandEncoder> enc = nil;
    for (const auto& c : batch) {
      const size_t bytes = c.dev.nbytes();
      if (bytes == 0) continue;
      id<MTLBuffer> host = nil;
      size_t hostOff = 0;
      std::shared_ptr<void> handle;
      if (pool_->find(c.host.data_ptr(), bytes, &handle, &hostOff)) {
        host = (__bridge id<MTLBuffer>)handle.get();
      } else {
        // Host memory MCCL does not own (a view of another Shared tensor):
        // a Shared copy of it; the command buffer keeps it alive.
        TORCH_CHECK(c.toDevice, "mccl: internal error: MPS staging buffer not found");
        host = [device_ newBufferWithBytes:c.host.data_ptr() length:bytes
                                   options:MTLResourceStorageModeShared];
      }
      if (enc == nil) enc = [cb blitCommandEncoder];
      if (c.toDevice) {
        [enc copyFromBuffer:host sourceOffset:hostOff toBuffer:bufferOf(c.dev)
            destinationOffset:offsetOf(c.dev) size:bytes];
      } else {
        [enc copyFromBuffer:bufferOf(c.dev) sourceOffset:offsetOf(c.dev) toBuffer:host
            destinationOffset:hostOff size:bytes];
      }
    }
    if (enc != nil) [enc endEncoding];
    const uint64_t v = ++copies_;
    [cb encodeSignalEvent:copyEvent_ value:v];
    [cb commit];
    ++queueCommits_;
    return v;
  }

  uint64_t copyValue() const override { return copyEvent_.signaledValue; }

  Stats stats() const override {
    Stats s;
    s.fences = fences_.load();
    s.streamCommits = streamCommits_.load();
    s.queueCommits = queueCommits_.load();
    s.bufferAllocations = pool_->allocations();
    return s;
  }

 private:
  static constexpr size_t kIdleStagingBytes = size_t{1} << 30;

  id<MTLDevice> device_;
  id<MTLCommandQueue> queue_;
  id<MTLSharedEvent> fenceEvent_;
  id<MTLSharedEvent> copyEvent_;
  std::shared_ptr<StagingPool> pool_;
  std::mutex fenceMu_, queueMu_;
  std::atomic<uint64_t> fences_{0}, copies_{0}, streamCommits_{0}, queueCommits_{0};
};

}  // namespace

bool metalPortCompiled() { return true; }

std::shared_ptr<MetalPort> metalPort(const std::string& who) {
  TORCH_CHECK(torch::mps::is_available(), who, ": MPS is not available on this Mac");
  static std::shared_ptr<MetalPort> port = std::make_shared<MetalPortImpl>();
  return port;
}

}  // namespace mccl::torch_adapter
