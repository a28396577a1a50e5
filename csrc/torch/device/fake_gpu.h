// The "GPU" of the fake devices that test device staging on Linux
// (fake_device.cc: a CUDA-like stream device; fake_mps.cc: MPS through a
// fake Metal port): one FIFO of work run by one thread, each copy `delay`
// after the previous one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "device/device.h"
#include "util/thread_name.h"

namespace mccl::torch_adapter {

struct FakeEvent final : DeviceEvent {
  bool done() const override { return flag.load(); }
  std::atomic<bool> flag{false};
};

class FakeGpu {
 public:
  FakeGpu(std::chrono::microseconds delay, const char* name) : delay_(delay) {
    std::string n = name;
    std::thread([this, n] {
      nameThisThread(n.c_str());
      loop();
    }).detach();  // lives as long as the process
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
  std::chrono::microseconds delay() const { return delay_; }

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
  const std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
};

// Counts a call from an MCCL thread (other than the submit thread) into what
// only the op's calling thread may touch; tests assert there are none.
void countIfMcclThread();
// A queued device copy whose device tensor was freed before it ran.
void countLifetimeViolation();
class MetalPort;
// The fake Metal port when MCCL_FAKE_DEVICE_FOR_TESTING=mps-*, else null.
MetalPort* fakeMetalPort();
// Fake Metal port: copies to the device (results) take `us` each from now
// on (a slow device); negative restores the port's own delay.
void setFakeCopyBackDelay(int64_t us);

// The caller's "stream" of the installed fake device (null when none), so
// tests can queue late-running "kernels" that write tensors.
FakeGpu* fakeCallerStream();

// at::empty on the CPU, filled with a poison pattern.
at::Tensor poisoned(const at::Tensor& like);

}  // namespace mccl::torch_adapter
