// A fake stream-ordered device for testing the device staging on machines
// without a GPU (MCCL_FAKE_DEVICE_FOR_TESTING=<microseconds>, or
// =mps-shared:<us> / mps-private:<us> for the MPS adapter, fake_mps.cc).
//
// CPU tensors are then treated as if they lived on a device: one serial
// executor thread stands in for the device and its streams, and runs every
// copy `delay` microseconds after the previous one, so a reader that does not
// wait for the right event sees the poison that fresh host buffers are filled
// with. It also counts calls that only the op's calling thread may make
// (recording on the caller's stream, copies in) arriving from MCCL's own
// threads; tests assert there are none.
#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "device/device.h"
#include "device/fake_gpu.h"
#include "device/mps_device.h"

namespace mccl::torch_adapter {

std::shared_ptr<MetalPort> makeFakeMetalPort(FakeGpu& torchStream, bool shared);

namespace {

std::atomic<int64_t> gViolations{0};
MetalPort* gFakePort = nullptr;  // the fake Metal port, when installed
FakeGpu* gCaller = nullptr;

class FakeDeviceOps final : public DeviceOps {
 public:
  explicit FakeDeviceOps(FakeGpu& gpu) : gpu_(gpu) {}
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  EventPtr recordCurrent() override {
    countIfMcclThread();
    return gpu_.record();
  }
  void sideWaits(const EventPtr&) override {}  // one queue: already ordered
  void toHost(const at::Tensor& host, const at::Tensor& dev) override {
    countIfMcclThread();
    auto delay = gpu_.delay();
    at::Tensor h = host, d = dev;
    gpu_.enqueue([h, d, delay]() mutable {
      std::this_thread::sleep_for(delay);
      h.copy_(d);
    });
  }
  void toDevice(const at::Tensor& dev, const at::Tensor& host) override {
    auto delay = gpu_.delay();
    at::Tensor h = host, d = dev;
    gpu_.enqueue([h, d, delay]() mutable {
      std::this_thread::sleep_for(delay);
      d.copy_(h);
    });
  }
  EventPtr recordSide() override { return gpu_.record(); }
  void currentWaits(const EventPtr& e) override {
    // The host is the caller's "stream" here: it waits.
    while (!e->done()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  at::Tensor hostLike(const at::Tensor& dev) override {
    countIfMcclThread();
    return poisoned(dev);
  }
  void useOnSide(const at::Tensor&) override {}
  void withSideCurrent(const std::function<void()>& fn) override { fn(); }
  bool futureOrdersStreams() const override { return false; }

 private:
  FakeGpu& gpu_;
};

}  // namespace

void countIfMcclThread() {
  char name[32] = {0};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  // Callback runners run user code (then() callbacks), which may issue ops
  // as any calling thread does.
  if (std::strncmp(name, "mccl-", 5) == 0 && std::strcmp(name, "mccl-submit") != 0 &&
      std::strcmp(name, "mccl-cb-run") != 0) {
    gViolations.fetch_add(1);
  }
}

FakeGpu* fakeCallerStream() { return gCaller; }

at::Tensor poisoned(const at::Tensor& like) {
  at::Tensor h = at::empty(like.sizes(), like.options().device(at::kCPU).memory_format(
                                             at::MemoryFormat::Contiguous));
  if (h.numel() > 0) std::memset(h.data_ptr(), 0xA5, h.nbytes());
  return h;
}

// Installs the fake device when MCCL_FAKE_DEVICE_FOR_TESTING is set; returns
// whether it is on. Called once, when the extension loads.
bool installFakeDeviceFromEnv() {
  const char* v = std::getenv("MCCL_FAKE_DEVICE_FOR_TESTING");
  if (v == nullptr || *v == '\0') return false;
  std::string spec = v;
  enum { kStream, kMpsShared, kMpsPrivate } kind = kStream;
  for (auto [prefix, k] : {std::pair{"mps-shared:", kMpsShared}, std::pair{"mps-private:", kMpsPrivate}}) {
    std::string p = prefix;
    if (spec.rfind(p, 0) == 0) {
      kind = k;
      spec = spec.substr(p.size());
    }
  }
  markFakeDevice();
  gCaller = new FakeGpu(std::chrono::microseconds(std::atoi(spec.c_str())), "fake-gpu");
  if (kind == kStream) {
    setDeviceOpsFactoryForTesting([](c10::Device d) -> std::shared_ptr<DeviceOps> {
      if (!d.is_cpu()) return nullptr;
      return std::make_shared<FakeDeviceOps>(*gCaller);
    });
  } else {
    // Never destroyed: its queue's thread runs until the process exits.
    static auto* port = new std::shared_ptr<MetalPort>(makeFakeMetalPort(*gCaller, kind == kMpsShared));
    gFakePort = port->get();
    setDeviceOpsFactoryForTesting([](c10::Device d) -> std::shared_ptr<DeviceOps> {
      return d.is_cpu() ? makeMpsDeviceOps(*port, d) : nullptr;
    });
  }
  return true;
}

int64_t fakeDeviceViolations() { return gViolations.load(); }

MetalPort* fakeMetalPort() { return gFakePort; }

namespace {
std::atomic<int64_t> gLifetimeViolations{0};
}  // namespace

void countLifetimeViolation() { gLifetimeViolations.fetch_add(1); }
int64_t fakeDeviceLifetimeViolations() { return gLifetimeViolations.load(); }

}  // namespace mccl::torch_adapter
