// Where the Future callbacks (then()) of CPU and CUDA ops run when the
// caller holds the Future (Work.get_future(): DDP's comm hooks, user
// callbacks): on a pool of threads of their own, never on the MCCL thread
// that finished the op (often a connection's receive thread).
//
// A callback may issue collectives and wait for them (PowerSGD's do): the
// network thread it would otherwise block is the one those collectives
// need, and their own Futures' callbacks need a thread too. So every queued
// mark gets a thread of its own: an idle one, or a new one ("mccl-then";
// past 64 of them a warning says that many callbacks wait for later ops).
// Idle threads stay for the next marks. A pool that cannot start a thread
// runs the mark where it is (as before the pool). Not fork-safe: a forked
// child that uses MCCL again should not inherit a process that marked
// Futures (its pool's threads are not copied). The pool lives as long as the process, as the
// completion thread does (device/completer.h).
//
// A Work whose Future nobody asked for is marked where it completes: no
// callback can be attached to it yet, so none runs there (work.cc).
#pragma once

#include <functional>

namespace mccl::torch_adapter {

// Runs `mark` on a pool thread (free, or started for it).
void runOnCallbackThread(std::function<void()> mark);

// Whether the calling thread is one of the pool's (tests).
bool onCallbackPoolThread();

}  // namespace mccl::torch_adapter
