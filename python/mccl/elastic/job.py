"""An elastic training job: members join and leave at step boundaries, a
crash costs at most the step in flight, and nobody restarts.

    job = mccl.elastic.Job("10.0.0.1:29400", job_id="vit")
    state = mccl.elastic.State(model, optimizer, mccl.elastic.ElasticSampler(len(data), batch=32))
    job.run(state, train_step, steps=10_000)   # train_step(ddp_model, indices) -> loss

One step, on every member:
  1. its share of the step's samples (the sampler splits what is left of the
     epoch among the current members);
  2. train_step: forward and backward through DDP on the current group (the
     gradients are averaged over the members of this step);
  3. the boundary: one small all_reduce carrying who asks to leave and (from
     rank 0, whose thread watches the store) how many joiners wait; it is
     issued before the step's compute and waited for here, so a stable
     period pays almost nothing for it;
  4. the optimizer step, and the sampler moves on (the step is committed);
  5. if the boundary said so, the membership changes: leavers go (the others
     shrink the group over the connections they have: dist.shrink_group);
     joiners come (a new process group for the new generation, then the live
     state goes to everyone from rank 0 by MCCL broadcast).

A failure in 2 or 3 (a member crashed, lost its link, or stopped
answering): survivors check in at the store, agree on the dead set (the
first decision written wins), shrink with SHRINK_ABORT, and redo the step.
A survivor that had already committed the step hands its state to those that
had not. A rank that finds itself in the dead set exits with a message.

With a ShardedState (FSDP2) the model is rebuilt on every new group: joins
and leaves reshard the live state, a crash rolls back to the last sharded
checkpoint (sharded.py).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import gc
import inspect
import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from .membership import BeatWatch, Membership
from .state import State, broadcast_state

log = logging.getLogger("mccl.elastic")

try:
    from torch.distributed.checkpoint.api import CheckpointException as _CheckpointException
except ImportError:  # pragma: no cover - every torch we support has it
    class _CheckpointException(Exception):
        pass


def _no_sync(model):
    """Gradients of a micro-batch stay local: DDP's no_sync(), or FSDP2's
    set_requires_gradient_sync(False) for the block."""
    if hasattr(model, "no_sync"):
        return model.no_sync()

    @contextlib.contextmanager
    def fsdp():
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    return fsdp()


class Excluded(RuntimeError):
    """This process was left out of the next generation (the others decided it
    had failed); it should exit."""


class _Left(Exception):
    """A member that asked to leave is not in the generation the others went
    on with: it has left (raised out of a recovery; run() returns "left")."""


class _Regroup(RuntimeError):
    """The generation this process is in (or was about to form) cannot go on
    as it is: recover it with the others it lists (run() treats it as a
    failure of a link)."""


@dataclass
class Change:
    """One membership change, as logged and kept in Job.history."""
    generation: int
    # "start", "leave", "join", "crash", "regroup"; "pass": joiners were
    # counted but none still waited (the group goes on unchanged); "end":
    # every member left at one boundary (the job is over)
    cause: str
    world: int
    left: list[str] = field(default_factory=list)
    joined: list[str] = field(default_factory=list)
    stall_s: float = 0.0  # from the boundary (or the failure) to the new group being ready
    state_bytes: int = 0
    step: int = 0
    parts: dict = field(default_factory=dict)  # where the stall went (seconds)


def _connect(store: str | dist.Store, timeout: timedelta) -> dist.Store:
    if isinstance(store, dist.Store):
        return store
    host, _, port = store.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"mccl.elastic: store address {store!r} is not host:port")
    return dist.TCPStore(host, int(port), is_master=False, timeout=timeout, wait_for_workers=False)


class Job:
    def __init__(self, store: str | dist.Store, job_id: str = "default", *, initial: int = 1,
                 initial_wait_s: float = 10.0, crash_grace_s: float = 1.0, timeout_s: float = 120.0,
                 check_every: int = 1, global_batch: int | None = None, member_id: str | None = None,
                 backend: str = "mccl"):
        """`store`: "host:port" of the job's TCPStore (mccl elastic serve), or a
        dist.Store. `initial`: members the first generation waits for (up to
        `initial_wait_s`). `crash_grace_s`: how long survivors of a failure
        wait for each other to check in when the dead are not all known.
        `check_every`: steps between boundaries that admit joiners (leaves
        and failures are seen at every step). `global_batch`: keep the
        samples per step constant by accumulating micro-batches (each of the
        sampler's batch) as the world shrinks; None lets it grow and shrink
        with the world."""
        if initial < 1 or check_every < 1:
            raise ValueError("mccl.elastic.Job: initial and check_every must be at least 1")
        if crash_grace_s <= 0 or timeout_s <= 0:
            raise ValueError("mccl.elastic.Job: crash_grace_s and timeout_s must be positive")
        self.timeout = timedelta(seconds=timeout_s)
        self.members = Membership(_connect(store, self.timeout), job_id)
        self.id = member_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.initial, self.initial_wait_s = initial, initial_wait_s
        self.crash_grace_s, self.check_every = crash_grace_s, check_every
        self.global_batch = global_batch
        self.backend = backend
        self.generation = -1
        self.record: dict = {}
        self.history: list[Change] = []
        self._leave = False
        self._ddp = None
        self._ddp_gen = -1
        # Seconds of each recent step boundary (the small all_reduce, plus rank
        # 0's look at the store): what a stable period pays for elasticity.
        self.boundary_s: collections.deque = collections.deque(maxlen=1000)
        self._poller: threading.Thread | None = None
        self._seen_requests = 0
        self._beats = BeatWatch()  # rank 0's watcher fills it
        self._closing = False
        # Whether this process's group of the current generation formed, and
        # whether its state is the job's (a joiner's is not until the first
        # state sync ends; rank 0 of the first generation's is by definition).
        self._formed = False
        self._synced = False
        self._newcomer = False  # admitted, first state sync not yet done

    # ---- membership --------------------------------------------------------
    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def world(self) -> int:
        return dist.get_world_size()

    def request_leave(self) -> None:
        """Leave at the next step boundary, after this step is committed."""
        self._leave = True

    def leave_on_signals(self, signals=(signal.SIGTERM, signal.SIGINT)) -> None:
        """SIGTERM (what the agent and launchers send) or SIGINT asks for a
        graceful leave; a second one ends the process at once."""
        def handler(signum, _frame):
            if self._leave:
                os._exit(128 + signum)
            log.warning("mccl.elastic: %s: leaving at the next step boundary", signal.Signals(signum).name)
            self.request_leave()
        for s in signals:
            signal.signal(s, handler)

    def _init_group(self, n: int, rec: dict, after: int | None = None) -> None:
        """This process's group of generation n. The generation is this
        process's from here on, formed or not: a group that fails to form
        (a member died before its rendezvous) is recovered like one that
        failed later, among the members its record lists. `after`: the
        generation whose step boundary led here (a join), which members
        that failed at that boundary are recovering instead."""
        rank = rec["members"].index(self.id)
        self.generation, self.record, self._formed = n, rec, False
        # A failed init_process_group leaves torch's group counter raised,
        # which would name this process's next group differently from the
        # others' (another store prefix: they would never meet). With no
        # group left, nothing else uses it; pg/<n>/ keeps every attempt apart.
        world_state = getattr(dist.distributed_c10d, "_world", None)
        if not dist.is_initialized() and hasattr(world_state, "group_count"):
            world_state.group_count = 0
        self._meet_rank0(n, rank, len(rec["members"]), after)
        store = dist.PrefixStore(f"pg/{n}/", self.members.store)
        dist.init_process_group(self.backend, store=store, rank=rank, world_size=len(rec["members"]),
                                timeout=self.timeout)
        self._formed = True

    def _meet_rank0(self, n: int, rank: int, world: int, after: int | None) -> None:
        """Generation n's members meet before its rendezvous. Each other
        member says it is here (pg/<n>/here/<rank>) and waits for rank 0 to
        open the group (pg/<n>/open), or for a member that checked in to
        recover generation n (its rank 0 found it cannot form, e.g. a member
        it lists died first): then it recovers it too, at once, instead of
        waiting out the rendezvous's timeout for a rank 0 that will never
        come. Rank 0 opens once every member is here; it recovers instead
        when a member checks in to recover generation n, or generation
        `after`: members for which the boundary that wrote n failed (rank 0
        had passed its barrier), who will not come."""
        m = self.members
        if rank == 0:
            watch = [f"rec/{n}/alive"] + ([f"rec/{after}/alive"] if after is not None else [])
            here = [f"pg/{n}/here/{r}" for r in range(1, world)]
            end = time.monotonic() + self.timeout.total_seconds()
            while here and not m.store.check(here):
                for key in watch:
                    if m.has(key):
                        raise _Regroup(f"mccl.elastic: members are recovering generation {key.split('/')[1]} "
                                       f"while generation {n} forms")
                if time.monotonic() >= end:
                    missing = [k.rsplit("/", 1)[1] for k in here if not m.has(k)]
                    raise _Regroup(f"mccl.elastic: generation {n}'s ranks {', '.join(missing)} did not come to "
                                   f"its rendezvous within {self.timeout.total_seconds():g} s")
                time.sleep(0.005)
            m.store.set(f"pg/{n}/open", "1")
            return
        m.store.set(f"pg/{n}/here/{rank}", "1")
        end = time.monotonic() + self.timeout.total_seconds()
        while not m.has(f"pg/{n}/open"):
            if m.has(f"rec/{n}/alive"):
                raise _Regroup(f"mccl.elastic: generation {n} is being recovered before its group formed")
            if time.monotonic() >= end:
                break  # the rendezvous below times out in turn, naming what it waited for
            time.sleep(0.01)

    def _publish(self, n: int, rec: dict) -> dict:
        """Generation n's record: `rec`, or the one another member wrote first."""
        if self.members.publish(n, rec):
            return rec
        log.warning("mccl.elastic: generation %d was published by another member", n)
        return self.members.generation(n)

    def join(self) -> None:
        """Blocks until this process is a member (the first generation forms
        from the first `initial` requests, or those in by `initial_wait_s`)."""
        t0 = time.monotonic()
        k = self.members.register(self.id)
        if k == 1 and self.members.latest() < 0:
            end = time.monotonic() + self.initial_wait_s
            while self.members.requests() < self.initial and time.monotonic() < end:
                time.sleep(0.01)
            last = self.members.requests()
            founders = [m for _, m in self.members.live_requests(1, last, fresh_s=30.0)]
            self._publish(0, {"members": founders, "admitted": last, "cause": "start", "step": 0})
        n, rec = self.members.wait_admitted(self.id, k, self.timeout)
        self._synced = n == 0 and rec["members"][0] == self.id
        self._newcomer = True
        self._init_group(n, rec)
        self._note(Change(n, "start" if n == 0 else "join", len(rec["members"]),
                          joined=[self.id], stall_s=time.monotonic() - t0, step=rec.get("step", 0)))

    def _note(self, c: Change) -> None:
        self.history.append(c)
        log.warning("mccl.elastic: generation %d (%s): %d members%s%s; stall %.3f s%s", c.generation, c.cause,
                    c.world, f", left {c.left}" if c.left else "", f", joined {c.joined}" if c.joined else "",
                    c.stall_s, f", {c.state_bytes / 1e6:.1f} MB of state sent" if c.state_bytes else "")

    # ---- the loop ----------------------------------------------------------
    def micro_batches(self) -> int:
        """Micro-batches per member per step (1 unless global_batch is set)."""
        if self.global_batch is None:
            return 1
        return max(1, math.ceil(self.global_batch / (self._sampler_batch * self.world)))

    def model(self, state):
        """The model train_step gets: DDP around state.model for this
        generation's group, or the FSDP2 model of a ShardedState."""
        return state.model if state.sharded else self.ddp(state)

    def ddp(self, state: State) -> torch.nn.parallel.DistributedDataParallel:
        """The model wrapped for this generation's group (rebuilt after a change)."""
        if self._ddp is None or self._ddp_gen != self.generation:
            # The old wrapper's autograd hooks reduce on the old group: it
            # must be gone before the next backward.
            self._ddp = None
            gc.collect()
            ddp = torch.nn.parallel.DistributedDataParallel
            # Every member's model is the same already (state sync): skip DDP's
            # own broadcast of it where torch lets us (2.6+ has init_sync).
            kw = {"init_sync": False} if "init_sync" in inspect.signature(ddp.__init__).parameters else {}
            self._ddp = ddp(state.model, **kw)
            self._ddp_gen = self.generation
        return self._ddp

    def run(self, state: State, train_step, steps: int, on_step=None) -> str:
        """Trains until state.step == steps; returns "done", or "left" after a
        graceful leave. train_step(ddp_model, indices) does forward and
        backward on this member's indices (a list of dataset indices) and
        returns the loss. on_step(job, state, loss), if given, runs after each
        committed step (logging, metrics)."""
        self._sampler_batch = state.sampler.batch
        if self.generation >= 0 and not self._formed:
            # join() (called by the caller) was admitted, but its group did not form.
            self._recover_until_formed(state, _Regroup(f"mccl.elastic: generation {self.generation} did not form"))
        while True:
            try:
                if self.generation < 0:
                    self.join()
                if self._newcomer:
                    # A newcomer's first state, from rank 0 (the members
                    # relay it in _change); a failure here is recovered too.
                    if state.sharded:
                        state.rebuild(state.initial() if self.generation == 0 and self.rank == 0 else None)
                    else:
                        self._sync(state, src=0, load=True)
                    self._newcomer, self._synced = False, True
                if state.step >= steps:
                    break
                if state.sharded and state.checkpoint_due():
                    state.save()
                boundary = self._boundary(state.step)
                micro = self.micro_batches()
                idx = state.sampler.indices(self.rank, self.world, micro)
                model = self.model(state)
                chunks = [idx[i::micro] for i in range(micro)] if micro > 1 else [idx]
                for i, part in enumerate(chunks):
                    if i < len(chunks) - 1:
                        with _no_sync(model):
                            train_step(model, part)
                    else:
                        loss = train_step(model, part)
                tb = time.perf_counter()
                leavers, joiners = boundary()
                self.boundary_s.append(time.perf_counter() - tb)
                state.optimizer.step()
                state.optimizer.zero_grad(set_to_none=True)
                state.sampler.advance(self.world, micro)
                state.step += 1
                if on_step is not None:
                    on_step(self, state, loss)
                if leavers or joiners:
                    if self._change(state, leavers, joiners) == "left":
                        return "left"
            except (dist.DistBackendError, RuntimeError, _CheckpointException) as e:
                if not self._is_comm_failure(e):
                    raise
                if state.optimizer is not None:
                    state.optimizer.zero_grad(set_to_none=True)
                try:
                    self._recover_until_formed(state, e)
                except _Left:
                    return "left"
        return "done"

    @staticmethod
    def _is_comm_failure(e: BaseException) -> bool:
        # torch.distributed.checkpoint reports a rank's failure inside its own
        # CheckpointException (one entry per failed rank).
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            return any(Job._is_comm_failure(f) for f in failures.values() if isinstance(f, BaseException))
        # MCCL's errors name the rank ("mccl rank 2/8 in group ..."); a store
        # error naming this module's keys ("mccl-elastic/...") is not one.
        return isinstance(e, (dist.DistBackendError, _Regroup)) or "mccl rank " in str(e)

    def _boundary(self, step: int):
        """Starts the step's boundary: one small all_reduce of who asks to
        leave and (rank 0) how many joiners wait, issued before the step's
        compute so that it is done when the step ends. Returns a function that
        waits for it and gives (leaver ranks, joiners)."""
        world = self.world
        if self.rank < 3:
            self._watch()
        flags = torch.zeros(world + 1, dtype=torch.int64)
        if self._leave:
            flags[self.rank] = 1
        if self.rank == 0 and step % self.check_every == 0:
            flags[world] = max(0, self._requests() - int(self.record["admitted"]))
        work = dist.all_reduce(flags, async_op=True)

        def result():
            work.wait()
            return [r for r in range(world) if flags[r]], int(flags[world])

        return result

    def _requests(self) -> int:
        """Join requests so far, as rank 0 last saw them. The watcher thread
        (_watch) looks every 0.2 s, so a step boundary never waits for the
        store; where the store cannot be cloned, the boundary asks it."""
        if not self._watch():
            return self.members.requests()
        return self._seen_requests

    def _watch(self) -> bool:
        """Starts this member's watcher thread if it has none (False where the
        store cannot be cloned): with its own store connection it counts the
        join requests and watches their heartbeats every 0.2 s while this
        member is rank 0 (read at a boundary), and rewrites the job's
        heartbeat about once a second while it is one of the first three
        ranks (a joiner waits while that moves; three, so that one dying
        leaves the beat going), also while this member is stuck in a
        collective."""
        if self._poller is not None:
            return True
        clone = getattr(self.members.base, "clone", None)
        if clone is None or self._closing:
            return False
        watcher = Membership(clone(), self.members.job)
        self._seen_requests = watcher.requests()

        def poll():
            tick = 0
            while not self._closing:
                try:
                    # This member's rank in its generation's record (also while
                    # the generation's group forms or recovers: no group then).
                    rec = self.record if self.generation >= 0 else None
                    rank = rec["members"].index(self.id) if rec and self.id in rec["members"] else -1
                    if rank == 0:
                        self._seen_requests = watcher.requests()
                        self._beats.observe(watcher, int(rec.get("admitted", 0)) + 1,
                                            self._seen_requests)
                    if 0 <= rank < 3 and tick % 5 == 0:
                        watcher.job_beat()
                except Exception:  # noqa: BLE001 - the store is away (or a generation is changing): next time
                    pass
                tick += 1
                time.sleep(0.2)

        self._poller = threading.Thread(target=poll, name="mccl-elastic-watch", daemon=True)
        self._poller.start()
        # A daemon thread that Python's exit finds inside a store call is
        # ended by a forced unwind through torch's C++ frames, which aborts
        # the process ("terminate called without an active exception").
        atexit.register(self.close)
        return True

    def close(self) -> None:
        """Stops the thread that watches the store for joiners (run at exit
        too; the job keeps working, asking the store at each boundary)."""
        self._closing = True
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.join(timeout=self.timeout.total_seconds())

    def _change(self, state: State, leavers: list[int], joiners: int) -> str:
        t0 = time.monotonic()
        rec, n = self.record, self.generation
        old = list(rec["members"])
        stay = [m for r, m in enumerate(old) if r not in leavers]
        if not stay:
            # Every member leaves at this boundary: the job ends here. Its
            # last generation lists nobody, so a joiner still waiting learns
            # that the job is over instead of waiting out its timeout.
            end = {"members": [], "admitted": rec["admitted"], "step": state.step, "cause": "end"}
            self._publish(n + 1, end)  # every member writes the same record: whoever is first
            dist.destroy_process_group()
            self._note(Change(n + 1, "end", 0, left=old, stall_s=time.monotonic() - t0, step=state.step))
            return "left"
        if not joiners:
            # Every member computes the same next generation and writes it
            # (the same record: whoever is first), so no member's death
            # leaves it unwritten.
            mine = {"members": stay, "admitted": rec["admitted"], "step": state.step, "cause": "leave"}
            # Every member passed the boundary: a member whose boundary op
            # failed (it is recovering generation n) fails this barrier here
            # too, so no one shrinks past it.
            dist.barrier()
            nxt = self._publish(n + 1, mine)
            if nxt != mine:
                # Members that failed at this boundary recovered generation n
                # meanwhile: go through that recovery too.
                raise _Regroup(f"mccl.elastic: generation {n + 1} is a {nxt.get('cause')} record written by "
                               f"members that failed at step {state.step}")
        else:
            if stay[0] == self.id:
                # One member looks at the joiners (those still waiting) and
                # publishes; the others read what it wrote.
                admitted = int(rec["admitted"]) + joiners
                fresh = [m for _, m in self.members.live_requests(int(rec["admitted"]) + 1, admitted,
                                                                  fresh_s=5.0, beats=self._beats)]
                self._publish(n + 1, {"members": stay + fresh, "admitted": admitted, "step": state.step,
                                      "cause": "join" if fresh else "leave" if leavers else "pass"})
            # The record is there once this barrier of the old group ends; a
            # decider that dies before writing it fails the barrier (a
            # failure recovered as any other) instead of leaving the others
            # waiting on the store.
            dist.barrier()
            nxt = self.members.generation(n + 1)
            if nxt.get("cause") in ("crash", "regroup"):
                raise _Regroup(f"mccl.elastic: generation {n + 1} is a {nxt.get('cause')} record written by "
                               f"members that failed at step {state.step}")
        left = [old[r] for r in leavers]
        joined = nxt["members"][len(stay):]
        # A sharded state is whole nowhere: gather it (leavers too) to the
        # member that will be rank 0 of the next generation.
        full = state.gather(dst=old.index(stay[0])) if state.sharded else None
        if self.rank in leavers:
            # This member is done with the old group: the others may drop it
            # now (see _await_leavers).
            self.members.store.set(f"pg/{n}/left/{self.rank}", "1")
            dist.destroy_process_group()
            self._note(Change(n + 1, nxt["cause"], len(nxt["members"]), left=left, joined=joined,
                              stall_s=time.monotonic() - t0, step=state.step))
            return "left"
        if not joined and not leavers:
            # The joiners counted had stopped waiting (died, gave up): the
            # group goes on as it is; the generation records their requests
            # as handled, so they are not counted again.
            self.generation, self.record = n + 1, nxt
            self._note(Change(n + 1, "pass", self.world, stall_s=time.monotonic() - t0, step=state.step))
            return "unchanged"
        if not joined:
            # Leavers only: the same connections, renumbered (no rendezvous).
            self._await_leavers(n, leavers)
            self._shrink(n + 1, nxt, leavers, abort=False)
            sent = state.rebuild(full) if state.sharded else 0
            self._note(Change(n + 1, "leave", self.world, left=left, stall_s=time.monotonic() - t0,
                              state_bytes=sent, step=state.step))
            return "shrunk"
        t1 = time.monotonic()
        dist.destroy_process_group()
        t2 = time.monotonic()
        self._init_group(n + 1, nxt, after=n)
        t3 = time.monotonic()
        # Members hold the state already: they relay it (DDP) or reshard it.
        sent = state.rebuild(full) if state.sharded else self._sync(state, src=0, load=False)
        t4 = time.monotonic()
        self._note(Change(n + 1, "join", self.world, left=left, joined=joined, stall_s=t4 - t0,
                          state_bytes=sent, step=state.step,
                          parts={"agree_s": t1 - t0, "old_group_s": t2 - t1, "new_group_s": t3 - t2,
                                 "state_s": t4 - t3}))
        return "joined"

    def _await_leavers(self, n: int, leavers: list[int]) -> None:
        """Waits (a few seconds at most) until every leaver is through the old
        group's last barrier. The barrier ends on each rank as its own last
        message arrives, and shrinking drops the connections to the leavers:
        a member that shrank while a leaver was still inside it made the
        leaver's barrier fail, and the leaver's abort failed the members
        still in it (a regroup for nothing). A leaver that died after the
        barrier is not waited for longer than the bound."""
        keys = [f"pg/{n}/left/{r}" for r in leavers]
        end = time.monotonic() + min(5.0, self.timeout.total_seconds())
        while not self.members.store.check(keys) and time.monotonic() < end:
            time.sleep(0.002)

    def _shrink(self, n: int, nxt: dict, excluded: list[int], abort: bool) -> None:
        """Generation n without `excluded`: the live group shrunk over its
        own connections where torch has shrink_group (2.10+), else a new
        group of the same members."""
        if hasattr(dist, "shrink_group"):
            c10d = dist.distributed_c10d
            dist.shrink_group(excluded, shrink_flags=c10d.SHRINK_ABORT if abort else c10d.SHRINK_DEFAULT)
            self.generation, self.record, self._formed = n, nxt, True
        else:
            dist.destroy_process_group()
            self._init_group(n, nxt)

    def _sync(self, state: State, src: int, load: bool) -> int:
        return broadcast_state(state, src, load=load)

    def _failed_peers(self) -> list[int]:
        try:
            backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
            return list(getattr(backend, "failed_peers", []))
        except Exception:  # noqa: BLE001 - no group, or not an mccl one
            return []

    @staticmethod
    def _drop_group() -> None:
        """Destroys this generation's group, if it formed."""
        if dist.is_initialized():
            dist.destroy_process_group()

    def _recover_until_formed(self, state: State, error: Exception) -> None:
        """_recover, again for each failure during it (another member died
        while the survivors regrouped): each round recovers the generation
        the last one got to."""
        while True:
            try:
                self._recover(state, error)
                return
            except (dist.DistBackendError, RuntimeError, _CheckpointException) as e:
                if not self._is_comm_failure(e):
                    raise
                error = e

    def _left_in_recovery(self, n: int, rec: dict | None, state: State) -> None:
        """A member that asked to leave met a failure on its way out (often its
        own leave boundary's, when the others had already gone on without
        it) and is not in generation n: what it asked for. Raises _Left."""
        log.warning("mccl.elastic: generation %d goes on without this member, which asked to leave: left", n)
        self._note(Change(n, rec.get("cause", "leave") if rec else "crash",
                          len(rec["members"]) if rec else 0, left=[self.id], step=state.step))
        raise _Left()

    def _recover(self, state: State, error: Exception) -> None:
        """After a failure of generation n (its group failed, or never
        formed): the survivors among the members its record lists agree on
        the dead, follow generation n + 1's record (theirs, or one a member
        wrote before it failed) and make every member's state the job's."""
        t0 = time.monotonic()
        n, formed = self.generation, self._formed
        old = list(self.record["members"])
        world, rank = len(old), old.index(self.id)
        log.warning("mccl.elastic: generation %d %s at step %d: %s", n, "failed" if formed else "did not form",
                    state.step, str(error)[:300])
        store = self.members.store
        # -1: this member's state is not the job's yet (a joiner before its
        # first state), so it takes the state of one whose is.
        store.set(f"rec/{n}/step/{rank}", str(state.step if self._synced else -1))
        store.set(f"rec/{n}/formed/{rank}", "1" if formed else "0")
        self.members.check_in(n, rank, self._failed_peers() if formed else [])
        # A group that never formed is seen to fail at each member's own
        # timeout: wait that long for the others. And while the job has state
        # (step > 0), no decision without a member that holds it: a joiner
        # that saw the failure first must not decide alone that every member
        # is dead.
        grace = self.crash_grace_s if formed else self.timeout.total_seconds() + max(5.0, self.crash_grace_s)
        trained = int(self.record.get("step", 0)) > 0  # the job has state to lose
        holder_s = 2 * self.timeout.total_seconds() if trained else 0.0
        d = self.members.decide(n, world, f"rec/{n}/step", grace, holder_s=holder_s,
                                presumed_s=self.crash_grace_s)
        if rank in d["dead"]:
            self._drop_group()
            if self._leave:
                known = self.members.has(f"g/{n + 1}")
                self._left_in_recovery(n + 1, self.members.generation(n + 1) if known else None, state)
            raise Excluded(f"mccl.elastic: {self.id} was left out of generation {n + 1}: the other members "
                           f"did not hear from it within {grace:g} s of the failure")
        dead = d["dead"]
        steps = {int(r): s for r, s in d["steps"].items()}
        top = max(steps.values())
        if top < 0 and trained:
            self._drop_group()
            raise RuntimeError(f"mccl.elastic: generation {n} failed with every member that held the job's "
                               f"state (step {self.record.get('step')}); only newcomers survive, and they have "
                               "nothing to go on from")
        stay = [m for r, m in enumerate(old) if r not in dead]
        mine = {"members": stay, "admitted": self.record["admitted"], "step": max(top, 0),
                "cause": "crash" if dead else "regroup"}
        # Every survivor computes the same record and writes it; whoever is
        # first, it is the same.
        nxt = self._publish(n + 1, mine)
        if nxt != mine:
            # A member wrote generation n + 1 before the failure (a join it
            # had decided): its group cannot form as written (one it lists is
            # dead, or recovering here). Every process it lists, joiners too,
            # meets again in the recovery of that generation.
            self._drop_group()
            if self.id not in nxt["members"]:
                if self._leave:
                    self._left_in_recovery(n + 1, nxt, state)
                raise Excluded(f"mccl.elastic: {self.id} is not a member of generation {n + 1}")
            # Those dead here are presumed dead there: waited for only as
            # long as a crash (not the unformed group's timeout). Not taken
            # for dead at once: one may be alive, having passed the old
            # group's last op (a member that left it looks like a failure)
            # and waiting in the new group's rendezvous, from which it comes
            # to this recovery within moments (_meet_rank0).
            presumed = [nxt["members"].index(old[r]) for r in dead if old[r] in nxt["members"]]
            if presumed:
                store.append(f"rec/{n + 1}/presumed", "".join(f"{r}," for r in presumed))
            self.generation, self.record, self._formed = n + 1, nxt, False
            raise _Regroup(f"mccl.elastic: generation {n + 1} ({nxt.get('cause')}) was written before the "
                           f"failure of generation {n}; recovering it")
        # Shrink only if every survivor's group formed (one whose rendezvous
        # timed out has nothing to shrink): else all make a fresh one.
        everyone_formed = all(store.get(f"rec/{n}/formed/{r}").decode() == "1" for r in d["alive"])
        if dead and everyone_formed:
            self._shrink(n + 1, nxt, dead, abort=True)
        else:
            # Nobody died (a timeout, a lost link), or the group never
            # formed: a fresh group of the survivors.
            self._drop_group()
            self._init_group(n + 1, nxt)
        # Members that had committed the failed step hand its state over; a
        # sharded state lost the dead member's shards: back to its checkpoint.
        sent = 0
        if state.sharded and int(nxt["step"]) == 0:
            # Nothing trained yet (a member died as the job started, perhaps
            # before any checkpoint): start again from the new rank 0's
            # initial state.
            sent = state.rebuild(state.initial() if self.rank == 0 else None)
            log.warning("mccl.elastic: no step was committed: the state was built afresh")
        elif state.sharded:
            lost = state.restore()
            log.warning("mccl.elastic: rolled back %d step(s) to the checkpoint of step %d", lost, state.step)
        elif min(steps.values()) != top or top < 0:
            src = min(stay.index(old[r]) for r, s in steps.items() if s == top)
            load = steps[rank] != top or (top < 0 and self.rank != src)
            sent = self._sync(state, src=src, load=load)
        self._newcomer, self._synced = False, True
        self._note(Change(n + 1, nxt["cause"], self.world, left=[old[r] for r in dead],
                          stall_s=time.monotonic() - t0, state_bytes=sent, step=state.step))
