"""DiLoCoState's outer thread (diloco.py): where a fragment's outer step is
worked out off the training thread, and the spare tensors its copies reuse."""

from __future__ import annotations

import queue
import threading

import torch


class Prepared:
    """A fragment's outer step, worked out by the state's outer thread once
    its all-reduce has arrived, into new tensors: nothing of the job's state
    changes until apply() takes it up on the training thread (a failure
    before that drops it, and the sync is issued again)."""

    def __init__(self):
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.count = 0
        self.new = None          # the global fragment after the outer step (or None: no contribution)
        self.outer_state = None  # the outer optimizer's state for it after the step
        self.delta = None        # rebase: (raw - old) + new, what the local fragment gains
        self.seconds = 0.0       # the outer thread's time on it (the wait for the sum aside)
        self.step_here = False   # the outer optimizer is not copied: apply() steps it in place

    def result(self) -> "Prepared":
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self


class OuterThread:
    """One daemon thread that works out fragments' outer steps in the order
    they were issued: waits for the all-reduce, divides the sum, runs the
    outer optimizer on a copy of the global fragment and its state, and the
    rebase's delta. The training thread meanwhile trains the overlapped
    inner steps; at the apply point it only adds the delta (one pass over
    the fragment) and swaps the new tensors in. The thread ends when it has
    had nothing to do for IDLE_S (a state that is gone leaves no thread, and
    nothing of it stays referenced), and starts again with the next sync."""

    IDLE_S = 30.0

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def submit(self, fn) -> Prepared:
        out = Prepared()
        with self._lock:
            self._jobs.put((fn, out))
            if not self._running:
                try:
                    threading.Thread(target=self._loop, name="mccl-diloco-outer", daemon=True).start()
                except BaseException:
                    self._jobs = queue.SimpleQueue()  # nothing will run what is queued
                    raise
                self._running = True
        return out

    def _loop(self) -> None:
        while True:
            try:
                fn, out = self._jobs.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._running = False
                        return
                continue
            try:
                fn(out)
            except BaseException as e:  # noqa: BLE001 - handed to the training thread at apply
                out.error = e
            finally:
                out.done.set()
                del fn, out  # the state the job's closure holds is not kept alive by an idle thread


class SparePool:
    """Tensors that apply()'s swaps replaced (a global fragment, its outer
    state), kept for the outer thread's next copies: no fresh pages (a
    page fault per 4 KB of a 1 GB copy) and no unmapping on the training
    thread. At most SIZE are kept; threads share it."""

    SIZE = 4

    def __init__(self):
        self._spares: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, like: torch.Tensor) -> torch.Tensor:
        """A spare tensor shaped as `like`, or a new one."""
        with self._lock:
            for i, t in enumerate(self._spares):
                if t.shape == like.shape and t.dtype == like.dtype and t.device == like.device:
                    return self._spares.pop(i)
        return torch.empty_like(like, memory_format=torch.contiguous_format)

    def give(self, t: torch.Tensor) -> None:
        if t.numel() < (1 << 16) or not t.is_contiguous():
            return  # small: not worth keeping
        with self._lock:
            if len(self._spares) < self.SIZE:
                self._spares.append(t)

    def __len__(self) -> int:
        return len(self._spares)
