// Task: the coroutine type of collective algorithms.
//
// An algorithm is written as straight-line code that co_awaits its
// transfers; it never blocks a thread while it waits. The communicator's
// engine thread starts it; afterwards it is resumed by whichever thread
// completes the transfer it awaits (usually a connection's receive or send
// thread), by the watchdog at its deadline, or by poison(). So between two
// co_awaits an algorithm runs on one thread at a time, but not always the
// same thread: algorithm code must not rely on thread identity or
// thread-local state.
//
// A Task may co_await another Task (it runs as a subroutine). The outermost
// Task of an op reports its end through a callback installed with onDone().
#pragma once

#include <coroutine>
#include <exception>
#include <functional>
#include <utility>

namespace mccl {

class [[nodiscard]] Task {
 public:
  struct promise_type {
    std::exception_ptr error;
    std::coroutine_handle<> parent;        // the Task awaiting this one, if any
    std::function<void(std::exception_ptr)> onDone;  // outermost Task only

    Task get_return_object() { return Task(Handle::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }

    struct Final {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        promise_type& p = h.promise();
        if (p.parent) return p.parent;  // back to the awaiting Task
        // The outermost Task is done. The callback must not destroy this
        // frame; its owner does that later, from another call stack.
        if (p.onDone) p.onDone(p.error);
        return std::noop_coroutine();
      }
      void await_resume() noexcept {}
    };
    Final final_suspend() noexcept { return {}; }
  };
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle h) : h_(h) {}
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  // Outermost Task: installs the end callback, then runs until the first
  // suspension (or to the end).
  void start(std::function<void(std::exception_ptr)> onDone) {
    h_.promise().onDone = std::move(onDone);
    h_.resume();
  }
  bool done() const { return !h_ || h_.done(); }

  // co_await task: runs it as a subroutine and rethrows its error.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> parent) noexcept {
    h_.promise().parent = parent;
    return h_;
  }
  void await_resume() {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
  }

 private:
  void reset() {
    if (h_) h_.destroy();
    h_ = {};
  }
  Handle h_;
};

}  // namespace mccl
