// The Metal side of the MPS adapter: MetalPort on macOS (Objective-C++, ARC).
//
// NOT YET RUN ON A MAC: written from PyTorch's sources and Apple's Metal
// documentation (see ../shared/design/MPS.md and docs/architecture.md); the
// ordering around it is tested on Linux through fake_mps.cc.
//
// - fence(): on the op's calling thread, inside PyTorch's MPS dispatch
//   queue: commit what PyTorch has encoded (which ends its open encoders),
//   encode a signal of MCCL's fence event on the stream's command buffer,
//   commit again.
// - copies: MCCL's own MTLCommandQueue; each command buffer waits for its
//   fence value, blits, and signals MCCL's copy event.
// - memory: a tensor's storage data pointer is its id<MTLBuffer> (PyTorch's
//   getMTLBufferStorage); Shared buffers are read and written by the CPU in
//   place, Private ones through blits into Shared buffers MCCL owns.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/mps.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "mps_device.h"

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
  }

  uint64_t fence() override {
    std::lock_guard<std::mutex> lock(fenceMu_);
    const uint64_t v = ++fences_;
    id<MTLSharedEvent> ev = fenceEvent_;
    dispatch_sync(torch::mps::get_dispatch_queue(), ^{
      torch::mps::commit();
      id<MTLCommandBuffer> cb = torch::mps::get_command_buffer();
      [cb encodeSignalEvent:ev value:v];
      torch::mps::commit();
    });
    return v;
  }
  uint64_t fenceValue() const override { return fenceEvent_.signaledValue; }

  void* cpuAddress(const at::Tensor& t) override {
    id<MTLBuffer> b = bufferOf(t);
    if (b.storageMode != MTLStorageModeShared) return nullptr;
    return static_cast<char*>(b.contents) + offsetOf(t);
  }

  at::Tensor sharedLike(const at::Tensor& dev) override {
    const size_t bytes = std::max<size_t>(dev.nbytes(), 1);
    id<MTLBuffer> b = [device_ newBufferWithLength:bytes options:MTLResourceStorageModeShared];
    TORCH_CHECK(b != nil, "mccl: could not allocate a ", bytes, "-byte shared Metal buffer");
    void* p = b.contents;
    {
      std::lock_guard<std::mutex> lock(bufMu_);
      owned_[reinterpret_cast<uintptr_t>(p)] = Owned{b, bytes};
    }
    return at::from_blob(
        p, dev.sizes(),
        [this, p](void*) {
          std::lock_guard<std::mutex> lock(bufMu_);
          owned_.erase(reinterpret_cast<uintptr_t>(p));
        },
        dev.options().device(at::kCPU));
  }

  uint64_t copyOut(const at::Tensor& shared, const at::Tensor& dev, uint64_t after) override {
    auto [dst, dstOff] = ownedAt(shared.data_ptr(), dev.nbytes());
    return blit(after, bufferOf(dev), offsetOf(dev), dst, dstOff, dev.nbytes());
  }

  uint64_t copyIn(const at::Tensor& dev, const at::Tensor& src, uint64_t after) override {
    const size_t bytes = dev.nbytes();
    id<MTLBuffer> from = nil;
    size_t fromOff = 0;
    if (findOwned(src.data_ptr(), bytes, &from, &fromOff) == false && bytes > 0) {
      // Host memory MCCL does not own (a view of another Shared tensor):
      // a Shared copy of it; the command buffer keeps it alive.
      from = [device_ newBufferWithBytes:src.data_ptr() length:bytes
                                 options:MTLResourceStorageModeShared];
    }
    return blit(after, from, fromOff, bufferOf(dev), offsetOf(dev), bytes);
  }

  uint64_t copyValue() const override { return copyEvent_.signaledValue; }

 private:
  struct Owned {
    id<MTLBuffer> buffer;
    size_t bytes;
  };

  bool findOwned(const void* p, size_t bytes, id<MTLBuffer>* out, size_t* off) {
    std::lock_guard<std::mutex> lock(bufMu_);
    auto a = reinterpret_cast<uintptr_t>(p);
    auto it = owned_.upper_bound(a);
    if (it == owned_.begin()) return false;
    --it;
    if (a + bytes > it->first + it->second.bytes) return false;
    *out = it->second.buffer;
    *off = a - it->first;
    return true;
  }
  std::pair<id<MTLBuffer>, size_t> ownedAt(const void* p, size_t bytes) {
    id<MTLBuffer> b = nil;
    size_t off = 0;
    TORCH_CHECK(bytes == 0 || findOwned(p, bytes, &b, &off),
                "mccl: internal error: MPS staging buffer not found");
    return {b, off};
  }

  // One command buffer on MCCL's queue: wait for the fence, copy, signal.
  uint64_t blit(uint64_t after, id<MTLBuffer> src, size_t srcOff, id<MTLBuffer> dst, size_t dstOff,
                size_t bytes) {
    std::lock_guard<std::mutex> lock(queueMu_);  // values in commit order
    id<MTLCommandBuffer> cb = [queue_ commandBuffer];
    [cb encodeWaitForEvent:fenceEvent_ value:after];
    if (bytes > 0) {
      id<MTLBlitCommandEncoder> enc = [cb blitCommandEncoder];
      [enc copyFromBuffer:src sourceOffset:srcOff toBuffer:dst destinationOffset:dstOff size:bytes];
      [enc endEncoding];
    }
    const uint64_t v = ++copies_;
    [cb encodeSignalEvent:copyEvent_ value:v];
    [cb commit];
    return v;
  }

  id<MTLDevice> device_;
  id<MTLCommandQueue> queue_;
  id<MTLSharedEvent> fenceEvent_;
  id<MTLSharedEvent> copyEvent_;
  std::mutex fenceMu_, queueMu_, bufMu_;
  uint64_t fences_ = 0;
  uint64_t copies_ = 0;
  std::map<uintptr_t, Owned> owned_;
};

}  // namespace

std::shared_ptr<MetalPort> metalPort(const std::string& who) {
  TORCH_CHECK(torch::mps::is_available(), who, ": MPS is not available on this Mac");
  static std::shared_ptr<MetalPort> port = std::make_shared<MetalPortImpl>();
  return port;
}

}  // namespace mccl::torch_adapter
