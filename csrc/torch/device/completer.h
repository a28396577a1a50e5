// Completes device ops whose host must wait for the device's copies (MPS,
// the fake devices) on a thread of its own, so that the MCCL thread that
// finished the op's network part (often a connection's receive thread) goes
// straight back to the wire instead of polling the GPU.
//
// One per process, started on first use ("mccl-complete"). Jobs run in the
// order they were queued, each once its event has completed: one device's
// copies run in queue order, so waiting for the oldest first loses nothing.
// Future callbacks (then()) of such ops therefore run on this one thread,
// never on a network thread.
#pragma once

#include <functional>

#include "device/device.h"

namespace mccl::torch_adapter {

// Runs `job` on the completion thread once `ready` has completed (at once,
// in order behind earlier jobs, when `ready` is null or already done).
void completeWhen(EventPtr ready, std::function<void()> job);

// Whether the calling thread is the completion thread (tests).
bool onCompletionThread();

}  // namespace mccl::torch_adapter
