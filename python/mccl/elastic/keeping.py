"""Where an elastic job keeps its state on disk, whatever kind of state it
is: the job's side of durable/ (a State: rank 0's checkpoints, periodic ones
written in the background) and of ShardedState's sharded checkpoints (every
rank its shards, through torch.distributed.checkpoint).

    Keeping.of(checkpoint_dir, job_id, every_s, state)

A job without a folder keeps nothing (`enabled` is False): its state lives
only in its members, and it ends when the last one leaves.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger("mccl.elastic")


@dataclass(frozen=True)
class Ref:
    """A checkpoint, as the protocol names it."""
    name: str            # the folder's name in the checkpoint folder
    step: int
    generation: int = -1  # the generation that wrote it
    signature: str = ""
    incarnation: str = ""
    kind: str = ""        # periodic, dormant, stopped, final


def prepared_folder(folder: str) -> str:
    """`folder`, made if only its last part is missing. A missing parent is an
    error, not something to create: on a Mac whose share is not mounted,
    /Volumes/shared would otherwise become an empty local folder."""
    folder = os.path.abspath(folder)
    if not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"mccl.elastic: checkpoint_dir {folder}: its parent {parent} does not exist "
                                    "(is the share mounted?)")
        os.makedirs(folder, exist_ok=True)
    return folder


class Keeping:
    enabled = False
    where = "(no checkpoint folder)"

    @staticmethod
    def of(checkpoint_dir: str | None, job_id: str, every_s: float, state) -> "Keeping":
        if getattr(state, "sharded", False):
            folder = checkpoint_dir or state.checkpoint_dir
            return ShardedKeeping(folder, state) if folder else Keeping()
        return StateKeeping(checkpoint_dir, job_id, every_s) if checkpoint_dir else Keeping()

    def exists(self) -> Ref | None:
        """The newest checkpoint, checked by size only (cheap: what a process
        deciding whether to resume needs); None if there is none."""
        return self.latest()

    def latest(self) -> Ref | None:
        return None

    def find(self, name: str) -> Ref | None:
        return None

    def load(self, ref: Ref, state) -> int:
        raise RuntimeError("mccl.elastic: this job has no checkpoint folder (Job(checkpoint_dir=...))")

    def save_now(self, state, kind: str, meta: dict, writer: bool | None = None) -> str:
        return ""

    def periodic(self, state, meta) -> None:
        pass

    def fence(self) -> None:
        pass

    def close(self) -> None:
        pass


class StateKeeping(Keeping):
    """A State's checkpoints: written by the job's rank 0 alone (every member
    holds the same state), periodic ones in the background."""

    enabled = True

    def __init__(self, folder: str, job_id: str, every_s: float):
        from .durable import BackgroundSaver, Checkpoints
        self.where = prepared_folder(folder)
        self.ckpts = Checkpoints(self.where, keep=2, job_id=job_id)
        self._verified: set[str] = set()  # checkpoints hashed whole once already
        self.saver = BackgroundSaver(self.ckpts)
        self.every_s = every_s
        self._last = time.monotonic()
        # Seconds each periodic save held the training loop (the snapshot's copy).
        self.stalls: collections.deque = collections.deque(maxlen=1000)

    @staticmethod
    def _ref(r) -> Ref:
        meta = r.meta or {}
        return Ref(name=r.path.name, step=r.step, generation=int(meta.get("generation", -1)),
                   signature=str(meta.get("signature", "")), incarnation=str(meta.get("incarnation", "")),
                   kind=r.kind)

    def _verify(self, r):
        """Hashes a checkpoint's files once per process (they never change)."""
        if r.path.name not in self._verified:
            self.ckpts.verify(r)
            self._verified.add(r.path.name)
        return r

    def exists(self) -> Ref | None:
        r = self.ckpts.latest(verify=False)
        return self._ref(r) if r is not None else None

    def latest(self) -> Ref | None:
        r = self.ckpts.newest(self._verify)[0]
        return self._ref(r) if r is not None else None

    def _raw(self, name: str):
        """The named checkpoint, verified; None if it is gone or damaged."""
        for folder, ref, problem in self.ckpts.scan():
            if folder != name:
                continue
            try:
                if problem is not None:
                    raise problem
                return self._verify(ref)
            except Exception as e:  # noqa: BLE001 - damaged: the caller falls back to the newest valid one
                log.warning("mccl.elastic: checkpoint %s is not valid: %s", name, e)
                return None
        return None

    def find(self, name: str) -> Ref | None:
        r = self._raw(name)
        return self._ref(r) if r is not None else None

    def load(self, ref: Ref, state) -> int:
        from .durable import load_state
        self.fence()  # replaces what a background save may still be copying
        raw = self._raw(ref.name)
        if raw is None:
            raise RuntimeError(f"mccl.elastic: checkpoint {ref.name} in {self.where} is gone or not valid")
        state.load_state_dict(load_state(raw))
        return raw.nbytes

    def save_now(self, state, kind: str, meta: dict, writer: bool | None = None) -> str:
        """The writer (by default rank 0 of the current group) writes the
        state now, after any save in flight, and returns the checkpoint's
        name; the others return ""."""
        if not (dist.get_rank() == 0 if writer is None else writer):
            return ""
        self.saver.snapshot_and_save(state.step, state.state_dict(), kind=kind, meta=meta)
        ref = self.saver.wait()
        self._last = time.monotonic()
        return ref.path.name

    def periodic(self, state, meta) -> None:
        """Rank 0, at a committed step: a background save every `every_s`
        (`meta()` gives the manifest's meta). The parameters and the
        optimizer's state are copied on the saver's thread while the next
        step's forward and backward run (they change neither); fence()
        waits for that copy before anything changes them again. Buffers
        (a forward may update them) and every other object are copied
        here."""
        if dist.get_rank() != 0 or time.monotonic() - self._last < self.every_s:
            return
        self._last = time.monotonic()
        t0 = time.perf_counter()
        # A DiLoCoState changes its state between inner steps too (outer
        # steps, merges): copied whole here.
        deferred = None if getattr(state, "outer_loop", None) is not None else _stepped_by_optimizer(state)
        if self.saver.snapshot_and_save(state.step, state.state_dict(), kind="periodic", meta=meta(),
                                        deferred=deferred):
            self.stalls.append(time.perf_counter() - t0)
            if deferred is not None:
                # Whoever steps the optimizer next (the job, or a train_step
                # that calls step() itself) waits for the copy first.
                handle = None

                def before_step(*_):
                    handle.remove()
                    self.fence()
                handle = state.optimizer.register_step_pre_hook(before_step)

    def fence(self) -> None:
        """Before the optimizer step, a change or a recovery: the periodic
        save in flight has its copy of the state (its wait counts in the
        save's stall)."""
        waited = self.saver.fence()
        if waited and self.stalls:
            self.stalls[-1] += waited

    def close(self) -> None:
        try:
            self.saver.wait()
        except Exception as e:  # noqa: BLE001 - logged by the saver
            log.debug("mccl.elastic: the last background save failed: %s", e)


class ShardedKeeping(Keeping):
    """A ShardedState's sharded checkpoints (sharded.py writes and loads them,
    collectively; `latest` names the newest)."""

    enabled = True

    def __init__(self, folder: str, state):
        self.where = folder
        self.state = state
        if state.checkpoint_dir is None:
            state.checkpoint_dir = folder

    def latest(self) -> Ref | None:
        """The newest valid checkpoint (verified against its manifest once
        per process; sharded_files.py)."""
        from . import sharded_files as files
        name = files.newest_valid(self.where)
        return self._ref(name) if name is not None else None

    def _ref(self, name: str) -> Ref:
        import torch
        m = torch.load(os.path.join(self.where, name, "mccl-meta.pt"), weights_only=False)
        return Ref(name=name, step=int(m["step"]), generation=int(m.get("generation", -1)),
                   signature=str(m.get("signature", "")), incarnation=str(m.get("incarnation", "")),
                   kind=str(m.get("kind", "")))

    def find(self, name: str) -> Ref | None:
        from . import sharded_files as files
        if files.pointed(self.where) == name and files.legacy(os.path.join(self.where, name)):
            return self._ref(name)  # an MCCL before manifests wrote it: the pointer vouches for it
        why = files.check(os.path.join(self.where, name))
        if why is not None:
            log.warning("mccl.elastic: sharded checkpoint %s is not valid: %s", name, why)
            return None
        return self._ref(name)

    def save_now(self, state, kind: str, meta: dict, writer: bool | None = None) -> str:
        """Collective: every rank writes its shards."""
        return state.save(meta=dict(meta, kind=kind))


def newest_in(folder: str, job_id: str) -> Ref | None:
    """The newest valid checkpoint of job `job_id` in `folder`, whichever
    kind of state wrote it (for `mccl elastic resume --checkpoint-dir`)."""
    if os.path.exists(os.path.join(folder, "latest")):
        return ShardedKeeping(folder, _NoState()).latest()
    if not os.path.isdir(folder):
        return None
    return StateKeeping(folder, job_id, 3600.0).latest()


class _NoState:
    checkpoint_dir = None


def _stepped_by_optimizer(state):
    """Whether a tensor of state.state_dict() is one only the optimizer's
    step changes: a parameter or a tensor of the optimizer's state."""
    ptrs = {p.data_ptr() for g in state.optimizer.param_groups for p in g["params"]}
    for st in state.optimizer.state.values():
        ptrs.update(v.data_ptr() for v in st.values() if isinstance(v, torch.Tensor))
    return lambda t: t.data_ptr() in ptrs
