"""One state dict per checkpoint (torch.save), written now or in the background."""

from __future__ import annotations

import copy
import io
import logging
import threading
import time

import torch

from .checkpoints import CheckpointRef, Checkpoints, check_args

log = logging.getLogger("mccl.elastic.durable")

STATE_FILE = "state.pt"


def save_state(ckpts: Checkpoints, step: int, state_dict, kind: str = "periodic", meta: dict | None = None,
               name: str = STATE_FILE) -> CheckpointRef:
    """Writes `state_dict` as one file by torch.save, streamed to the file
    (no serialised copy in memory). Blocking."""
    return ckpts.write(step, {name: lambda f: torch.save(state_dict, f)}, kind, meta)


def load_state(ref: CheckpointRef, name: str = STATE_FILE, map_location=None):
    """The state dict of `ref`: its bytes are read once, checked against the
    manifest's sha256, then unpickled (weights_only=False: optimizer state
    and Python objects). Holds the file's bytes and the state at once."""
    return torch.load(io.BytesIO(ref.read(name)), map_location=map_location, weights_only=False)


def load_latest_state(ckpts: Checkpoints, name: str = STATE_FILE, map_location=None):
    """(ref, state dict) of the newest checkpoint whose `name` verifies,
    reading each candidate once (latest() then load_state reads it twice);
    (None, None) if there is none."""
    return ckpts.newest(lambda ref: load_state(ref, name, map_location))


class BackgroundSaver:
    """Periodic saves off the training thread (see __init__.py for the cost).

    snapshot_and_save() runs on the caller's thread and returns once the
    snapshot is taken; the write runs on a daemon thread, so a process that
    exits without wait() abandons it (harmlessly: writes are atomic). Meant
    for one caller thread. Counters and last_* are read without a lock.
    """

    def __init__(self, ckpts: Checkpoints, name: str = STATE_FILE):
        self.ckpts, self.name = ckpts, name
        self.saves = self.failures = self.skipped = 0
        self.last_ref: CheckpointRef | None = None
        self.last_error: BaseException | None = None  # of the latest finished save; None if it succeeded
        self.last_stall_s = self.last_write_s = 0.0
        self.last_bytes = self.bytes_written = 0  # checkpoint payload bytes
        self._buffers: list[torch.Tensor] = []  # snapshot buffers, by tensor order in the state
        self._thread: threading.Thread | None = None
        self._copied: threading.Event | None = None  # set once the save in flight copied its deferred tensors
        self._unreported: BaseException | None = None

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def snapshot_bytes(self) -> int:
        """CPU memory held by the snapshot buffers between saves."""
        return sum(b.numel() * b.element_size() for b in self._buffers)

    def snapshot_and_save(self, step: int, state_dict, kind: str = "periodic", meta: dict | None = None,
                          deferred=None) -> bool:
        """Snapshots `state_dict` now and writes it in the background. A
        periodic save while one is in flight is skipped (returns False); any
        other kind waits for the one in flight. Usage errors raise here;
        write errors go to last_error and wait().

        `deferred(tensor) -> bool` names CPU tensors whose copy may be made
        on the saver's thread instead (before it writes): the caller
        promises not to change them until fence() returns. The rest (other
        tensors, every other object) is copied before this returns."""
        meta = check_args(step, kind, meta)
        if self.busy:
            if kind == "periodic":
                self.skipped += 1
                log.debug("mccl.elastic.durable: periodic save of step %d skipped: the previous one is "
                          "still being written", step)
                return False
            self._thread.join()
        self._unreported = None  # an earlier failure was logged; wait() reports this save's
        t0 = time.perf_counter()
        snap, later = self._snapshot(state_dict, deferred)
        self.last_stall_s = time.perf_counter() - t0
        self._copied = threading.Event()
        if not later:
            self._copied.set()
        self._thread = threading.Thread(target=self._write, args=(step, snap, kind, meta, later, self._copied),
                                        daemon=True, name=f"mccl-checkpoint-{step}")
        try:
            self._thread.start()
        except BaseException:
            self._copied.set()  # nothing will copy: fence() must not wait for it
            raise
        return True

    def fence(self) -> float:
        """Blocks until the save in flight has copied its deferred tensors
        (the caller may change them again); returns the seconds it waited."""
        copied = self._copied
        if copied is None or copied.is_set():
            return 0.0
        t0 = time.perf_counter()
        copied.wait()
        return time.perf_counter() - t0

    def wait(self, timeout: float | None = None) -> CheckpointRef | None:
        """Blocks until the save in flight is written; raises the error of
        the latest save if no wait() has raised it yet. Returns last_ref."""
        t = self._thread
        if t is not None:
            t.join(timeout)
            if t.is_alive():
                raise TimeoutError(f"mccl.elastic.durable: the background save ({t.name}) is still being "
                                   f"written to {self.ckpts.root} after {timeout} s")
        err, self._unreported = self._unreported, None
        if err is not None:
            raise err
        return self.last_ref

    def _write(self, step: int, snap, kind: str, meta: dict, later=(), copied=None) -> None:
        t0 = time.perf_counter()
        try:
            try:
                for buf, t in later:
                    buf.copy_(t.detach())
            finally:
                if copied is not None:
                    copied.set()
            ref = save_state(self.ckpts, step, snap, kind, meta, name=self.name)
        except Exception as e:
            self.last_error = self._unreported = e
            self.failures += 1
            log.error("mccl.elastic.durable: background save of step %d (%s) to %s failed: %s: %s; training "
                      "goes on, the previous checkpoint stays the latest", step, kind, self.ckpts.root,
                      type(e).__name__, e)
        else:
            self.last_ref, self.last_error = ref, None
            self.saves += 1
            self.last_bytes = ref.nbytes
            self.bytes_written += ref.nbytes
        finally:
            self.last_write_s = time.perf_counter() - t0

    def _snapshot(self, state_dict, deferred=None):
        """A copy of `state_dict` whose plain tensors live in this saver's
        CPU buffers (one memcpy each) and whose other objects are deep
        copies, and the (buffer, tensor) pairs whose copy is deferred to the
        saver's thread. A tensor held twice (tied weights) is copied once;
        distinct views of one storage become distinct tensors."""
        tensors: dict[int, torch.Tensor] = {}
        _collect(state_dict, tensors)
        memo, buffers, by_view, devices, later = {}, [], {}, set(), []
        for t in tensors.values():
            if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided or t.is_quantized:
                continue  # deepcopy clones it
            view = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), t.stride(), t.is_conj(), t.is_neg())
            if view not in by_view:  # state_dict() detaches tied weights into distinct objects
                i = len(buffers)
                buf = self._buffers[i] if i < len(self._buffers) else None
                if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                    buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda)
                if deferred is not None and t.device.type == "cpu" and deferred(t):
                    later.append((buf, t))
                else:
                    buf.copy_(t.detach(), non_blocking=t.is_cuda)
                devices.add(t.device)
                by_view[view] = buf
                buffers.append(buf)
            memo[id(t)] = by_view[view]
        for d in devices:
            if d.type == "cuda":
                torch.cuda.synchronize(d)
        self._buffers = buffers
        return copy.deepcopy(state_dict, memo), later


def _collect(x, out: dict) -> None:
    if isinstance(x, torch.Tensor):
        out.setdefault(id(x), x)
    elif isinstance(x, dict):
        for v in x.values():
            _collect(v, out)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _collect(v, out)
