// A fake stream-ordered device for testing the device staging on machines
// without a GPU (MCCL_FAKE_DEVICE_FOR_TESTING=<microseconds>).
//
// CPU tensors are then treated as if they lived on a device: one serial
// executor thread stands in for the device and its streams, and runs every
// copy `delay` microseconds after the previous one, so a reader that does not
// wait for the right event sees the poison that fresh host buffers are filled
// with. It also counts calls that only the op's calling thread may make
// (recording on the caller's stream, copies in) arriving from MCCL's own
// threads; tests assert there are none.
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "device.h"
#include "util/thread_name.h"

namespace mccl::torch_adapter {
namespace {

std::atomic<int64_t> gViolations{0};

bool onMcclThread() {
  char name[32] = {0};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return std::strncmp(name, "mccl-", 5) == 0 && std::strcmp(name, "mccl-submit") != 0;
}

struct FakeEvent final : DeviceEvent {
  bool done() const override { return flag.load(); }
  std::atomic<bool> flag{false};
};

// The fake device: a FIFO of work run by one thread, `delay` apart.
class FakeGpu {
 public:
  explicit FakeGpu(std::chrono::microseconds delay) : delay_(delay) {
    thread_ = std::thread([this] {
      nameThisThread("fake-gpu");
      loop();
    });
    thread_.detach();  // lives as long as the process
  }
  void enqueue(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(fn));
    cv_.notify_all();
  }
  std::shared_ptr<FakeEvent> record() {
    auto e = std::make_shared<FakeEvent>();
    enqueue([e] { e->flag.store(true); });
    return e;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !q_.empty(); });
      auto fn = std::move(q_.front());
      q_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  friend class FakeDeviceOps;
  const std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::thread thread_;
};

class FakeDeviceOps final : public DeviceOps {
 public:
  explicit FakeDeviceOps(FakeGpu& gpu) : gpu_(gpu) {}
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  EventPtr recordCurrent() override {
    callerOnly();
    return gpu_.record();
  }
  void sideWaits(const EventPtr&) override {}  // one queue: already ordered
  void toHost(const at::Tensor& host, const at::Tensor& dev) override {
    callerOnly();
    auto delay = gpu_.delay_;
    at::Tensor h = host, d = dev;
    gpu_.enqueue([h, d, delay]() mutable {
      std::this_thread::sleep_for(delay);
      h.copy_(d);
    });
  }
  void toDevice(const at::Tensor& dev, const at::Tensor& host) override {
    auto delay = gpu_.delay_;
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
    callerOnly();
    at::Tensor h = at::empty(dev.sizes(), dev.options().memory_format(at::MemoryFormat::Contiguous));
    if (h.numel() > 0) std::memset(h.data_ptr(), 0xA5, h.nbytes());  // poison
    return h;
  }
  void useOnSide(const at::Tensor&) override {}
  void withSideCurrent(const std::function<void()>& fn) override { fn(); }
  bool futureOrdersStreams() const override { return false; }

 private:
  static void callerOnly() {
    if (onMcclThread()) gViolations.fetch_add(1);
  }
  FakeGpu& gpu_;
};

}  // namespace

// Installs the fake device when MCCL_FAKE_DEVICE_FOR_TESTING is set; returns
// whether it is on. Called once, when the extension loads.
bool installFakeDeviceFromEnv() {
  const char* v = std::getenv("MCCL_FAKE_DEVICE_FOR_TESTING");
  if (v == nullptr || *v == '\0') return false;
  markFakeDevice();
  static FakeGpu* gpu = new FakeGpu(std::chrono::microseconds(std::atoi(v)));
  setDeviceOpsFactoryForTesting([](c10::Device d) -> std::shared_ptr<DeviceOps> {
    if (!d.is_cpu()) return nullptr;
    return std::make_shared<FakeDeviceOps>(*gpu);
  });
  return true;
}

int64_t fakeDeviceViolations() { return gViolations.load(); }

}  // namespace mccl::torch_adapter
