"""An elastic training job: members join and leave at step boundaries, a
crash costs at most the step in flight, nobody restarts, and the job
outlives every machine (its members, and the store's).

    job = mccl.elastic.Job("10.0.0.1:29400", job_id="vit", checkpoint_dir="/Volumes/shared/ckpt/vit")
    state = mccl.elastic.State(model, optimizer, mccl.elastic.ElasticSampler(len(data), batch=32))
    job.run(state, train_step, steps=10_000)   # train_step(ddp_model, indices) -> loss

One step, on every member:
  1. its share of the step's samples (the sampler splits what is left of the
     epoch among the current members; evenly, or with shares="speed" in
     proportion to each member's measured speed: balance.py);
  2. train_step: forward and backward through DDP on the current group (the
     gradients are averaged over the members of this step);
  3. the boundary: one small all_reduce carrying who asks to leave, and
     (from rank 0, whose thread watches the store) how many joiners wait and
     whether the job was asked to end; it is issued once the step's compute
     is done, so what was asked during the step is acted on at its end, for
     one small all_reduce's latency per step;
  4. the optimizer step, and the sampler moves on (the step is committed);
     rank 0 snapshots the state for a background checkpoint now and then;
  5. if the boundary said so, the membership changes (transitions.py):
     leavers go, joiners come; when every member leaves, the job goes
     dormant with its state in the checkpoint folder, and the next member
     to come resumes it (joining.py).

A failure in 2 or 3 (a member crashed, lost its link, or stopped
answering): survivors check in at the store, agree on the dead set, shrink
and redo the step. An error that redoing cannot cure (train_step raised,
the ranks disagree on a collective, a failure that keeps coming back) stops
the job on every member, with its state saved and the error named.

The store may go away and come back empty: members keep training, write
back what it lost, and changes wait for it (store.py, watcher.py). Who may
found or resume a job, and when, is decisions.verdict's.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import gc
import inspect
import json
import logging
import math
import os
import signal
import socket
import time
import uuid
from datetime import timedelta

import torch
import torch.distributed as dist

from . import shares as sh
from . import signature as sigs
from .balance import Balancer
from .beacon import Beacon, route_address
from .events import Change, Excluded, JobStopped, Unreadable, _Done, _Left, _Regroup
from .joining import Joining
from .keeping import Keeping
from .membership import BeatWatch, Membership
from .records import Cause, Generation
from .state import State
from .store import StoreAway, connect
from .stragglers import StragglerPolicy
from .transitions import Transitions, _CheckpointException, deterministic
from .watcher import Watcher

log = logging.getLogger("mccl.elastic")

__all__ = ["Change", "Excluded", "Job"]

# After a store outage, how long the first boundary after a change may wait
# for a joiner the outage held back (they ask within about 0.2 s of its end).
AFTER_OUTAGE_S = 0.5


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


def _scalar(loss) -> float | None:
    """The loss train_step returned, as a number for the status page."""
    if isinstance(loss, torch.Tensor):
        return float(loss.detach()) if loss.numel() == 1 else None
    return float(loss) if isinstance(loss, (int, float)) else None


class _TrainStepError(Exception):
    """train_step raised something that is not a communication failure."""

    def __init__(self, error: BaseException, samples: list[int]):
        super().__init__(str(error))
        self.error, self.samples = error, samples


class Job(Joining, Transitions):
    def __init__(self, store, job_id: str = "default", *, initial: int = 1,
                 initial_wait_s: float = 10.0, crash_grace_s: float = 1.0, timeout_s: float = 120.0,
                 check_every: int = 1, global_batch: int | None = None, member_id: str | None = None,
                 backend: str = "mccl", create: bool = False, checkpoint_dir: str | None = None,
                 checkpoint_every_s: float = 300.0, reseed_s: float = 5.0, shares: str = "equal",
                 straggler: StragglerPolicy | None = None):
        """`store`: the job's store: "host:port" (or "tcp://host:port") of a
        TCPStore (`mccl elastic serve`), "etcd://h1:2379,h2:2379,h3:2379" for
        an etcd cluster, or a torch.distributed.Store.
        `create`: this process may found the job if it does not exist (the
        user's first launch; `mccl elastic create` does the same from the
        command line). A process that finds no job of its name and was not
        told to create it waits for it (up to `timeout_s`) and then fails,
        saying so: a mistyped job id never founds a job of its own.
        `checkpoint_dir`: a folder every member can read and write (the
        studio's file server). With it the job outlives its members: when
        every member has left, the state is there and the next member to
        come resumes at that step; rank 0 also saves the state in the
        background every `checkpoint_every_s`, the most a power cut can
        lose. Without it, the job ends when its last member leaves.
        `initial`: members the founding generation waits for (up to
        `initial_wait_s`; a dormant job is resumed at once by whoever
        comes). `crash_grace_s`: how long survivors of a failure wait for
        each other to check in when the dead are not all known.
        `timeout_s`: how long a group waits for a member (longer than the
        job's state takes to reach a joiner: its bytes over the link's
        goodput, since the members wait that long for it), and how long a
        joiner waits while no member of the job is seen alive (then it
        resumes the job from its checkpoint). `check_every`: steps between
        boundaries that admit joiners (leaves and failures are seen at every
        step). `global_batch`: keep the samples per step constant by
        accumulating micro-batches (each of the sampler's batch) as the world
        shrinks; None lets it grow and shrink with the world. `reseed_s`: how
        long a process waits on a store that holds no record of the job and
        came up less than that long ago (living members write it back within
        about a second of its return), before it may found or resume.
        `shares`: "equal" (every member the same number of samples) or
        "speed": each member's share of the step's samples follows its
        measured speed, and the gradient is weighed by sample count so that
        it is the mean over the step's samples (balance.py; train_step's
        loss must be a mean over its samples). `straggler` (with "speed"):
        a StragglerPolicy under which a member that stays far slower than
        the others leaves gracefully (stragglers.py)."""
        if initial < 1 or check_every < 1:
            raise ValueError("mccl.elastic.Job: initial and check_every must be at least 1")
        if crash_grace_s <= 0 or timeout_s <= 0 or checkpoint_every_s <= 0 or reseed_s < 0:
            raise ValueError("mccl.elastic.Job: crash_grace_s, timeout_s and checkpoint_every_s must be positive, "
                             "reseed_s not negative")
        self.timeout = timedelta(seconds=timeout_s)
        self.members = Membership(connect(store, self.timeout), job_id)
        self.id = member_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.initial, self.initial_wait_s = initial, initial_wait_s
        self.crash_grace_s, self.check_every = crash_grace_s, check_every
        self.global_batch = global_batch
        self.backend = backend
        self.create = create
        self.checkpoint_dir, self.checkpoint_every_s = checkpoint_dir, checkpoint_every_s
        self.reseed_s = reseed_s
        # ---- shares by speed (balance.py); None: the even split
        if shares not in ("equal", "speed"):
            raise ValueError(f"mccl.elastic.Job: shares must be 'equal' or 'speed', not {shares!r}")
        if straggler is not None and shares != "speed":
            raise ValueError("mccl.elastic.Job: a straggler policy needs shares='speed' (the members' measured "
                             "speeds are what it judges)")
        self._balance = Balancer(straggler=straggler) if shares == "speed" else None
        self._counts: list[int] | None = None  # this step's shares, every member's
        # (generation, its record): one attribute, so that the watcher thread
        # never reads a generation with another generation's record.
        self._current: tuple[int, Generation | None] = (-1, None)
        self._fenced = False  # the watcher saw the job go on without this member
        self.history: list[Change] = []
        self.skipped: list[int] = []  # samples train_step declared unreadable (Unreadable)
        # Seconds from asking to join to this member's first state being ready (once it is).
        self.ready_s: float | None = None
        self.step = 0                   # the job's committed steps, as this member last saw them
        self.steps: int | None = None   # run()'s target
        self._leave = False
        self._ddp = None
        self._ddp_gen = -1
        # Seconds of each recent step boundary (the small all_reduce, plus rank
        # 0's look at the store): what a stable period pays for elasticity.
        self.boundary_s: collections.deque = collections.deque(maxlen=1000)
        self._watcher: Watcher | None = None
        self._beats = BeatWatch()  # rank 0's watcher fills it
        self._closing = False
        self._pid = os.getpid()
        self._beacon = Beacon(self.id, route_address(self.members.store.host, 0))
        self._beacon_address = self._beacon.address
        self._sig, self._sig_lines = "", []
        self._durable = Keeping()
        self._alive_seen: bytes | None = None
        self._empty_since: float | None = None  # when this process first saw the store without the job
        self._alive_changed = time.monotonic()
        self._latest_n = -1
        self._end_at: int | None = None
        self._step_of_error = -1
        self._join_t0 = time.monotonic()
        self._status_at = 0.0
        self._last_loss: float | None = None
        self._step_times: collections.deque = collections.deque(maxlen=20)
        # Whether this process's group of the current generation formed, and
        # whether its state is the job's (a joiner's is not until the first
        # state sync ends; rank 0 of the first generation's is by definition).
        self._formed = False
        self._synced = False
        self._newcomer = False  # admitted, first state sync not yet done

    # ---- membership --------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._current[0]

    @property
    def record(self) -> Generation | None:
        return self._current[1]

    def _move_to(self, n: int, rec: Generation) -> None:
        self._current = (n, rec)

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

    def _note(self, c: Change, history: bool | None = None) -> None:
        """Logs a change, keeps it in Job.history and (written by one member:
        the new generation's rank 0, or the old one's when nobody is left)
        adds it to the job's history in the store for the status page;
        `history` overrides who writes."""
        self.history.append(c)
        rec = self.record
        if history is None:
            history = rec is not None and bool(rec.members) and rec.members[0] == self.id and \
                self.generation == (c.generation if c.world > 0 else c.generation - 1)
        if history:
            line = {"generation": c.generation, "cause": c.cause, "world": c.world, "joined": c.joined[:50],
                    "left": c.left[:50], "stall_s": round(c.stall_s, 4), "step": c.step, "bytes": c.state_bytes,
                    "time": round(time.time(), 3)}
            try:
                self.members.store.append(self.members.key("history"),
                                          json.dumps(line, separators=(",", ":")) + "\n", patience=0.0)
            except StoreAway:
                pass  # the status page misses one line; nothing else needs it
        log.warning("mccl.elastic: generation %d (%s): %d members%s%s; stall %.3f s%s", c.generation, c.cause,
                    c.world, f", left {c.left}" if c.left else "", f", joined {c.joined}" if c.joined else "",
                    c.stall_s, f", {c.state_bytes / 1e6:.1f} MB of state sent" if c.state_bytes else "")

    def _know_state(self, state) -> None:
        """The model's signature (checked against the job's at admission) and
        where the state is kept on disk."""
        if not self._sig_lines:
            self._sig_lines = sigs.of_state(state)
            if self._balance is not None:
                # Shares by speed widen the boundary's all_reduce: a member
                # with equal shares would meet it with another size (also
                # where the model has no signature of its own).
                self._sig_lines = self._sig_lines + ["job: shares=speed"]
            self._sig = sigs.signature(self._sig_lines) if self._sig_lines else ""
        if not self._durable.enabled:
            self._durable = Keeping.of(self.checkpoint_dir, self.members.job, self.checkpoint_every_s, state)

    def _meta(self) -> dict:
        rec = self.record
        return {"job": self.members.job, "generation": self.generation, "signature": self._sig,
                "incarnation": rec.incarnation if rec else "", "members": list(rec.members) if rec else [],
                "description": self._sig_lines}

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
        """Trains until state.step == steps, then ends the job (every member
        returns "done", the store records the job as finished, and a
        checkpoint folder gets the final state); returns "left" after a
        graceful leave, "done" too when the job was ended early (`mccl
        elastic end`). train_step(model, indices) does forward and backward
        on this member's indices (a list of dataset indices; an epoch's last,
        short step may leave a member none: it must still call backward,
        e.g. on a zero loss, since DDP reduces on every member) and returns
        the loss; it may raise Unreadable for samples it cannot read. Any other
        exception it raises stops the job on every member (JobStopped, with
        its traceback, the step and the samples). on_step(job, state, loss),
        if given, runs after each committed step (logging, metrics).

        The objects alive when run() starts, and again when it returns
        "left", are moved out of the garbage collector's reach
        (gc.freeze(); they are still freed when nothing refers to them).
        torch's import alone leaves about 250,000 of them, and a full
        collection walks them all: 0.5 s on a busy 2-core machine. The job
        collects at every change of its members (the old group's DDP
        wrapper must be gone before the next backward), which then walks
        only what the job made; a member that left is expected to exit
        before its agent's leave_deadline_s, and the interpreter's exit
        then skips them too (measured 1.6-3.5 s before, 0.3-0.6 s frozen)."""
        gc.freeze()
        try:
            result = self._run(state, train_step, steps, on_step)
        except _Left:
            result = "left"
        except _Done:
            result = "done"
        finally:
            self.close()
        if result == "left":
            gc.freeze()
        return result

    def _run(self, state: State, train_step, steps: int, on_step) -> str:
        # -- DiLoCo (issue 46): a DiLoCoState runs its own loop of inner steps,
        # outer syncs and changes at rounds' ends (diloco_loop.py).
        outer_loop = getattr(state, "outer_loop", None)
        if outer_loop is not None:
            return outer_loop(self, train_step, steps, on_step)
        # -- end DiLoCo
        self._sampler_batch = state.sampler.batch
        self.steps = steps
        self._know_state(state)
        if self.generation >= 0 and not self._formed:
            # join() (called by the caller) was admitted, but its group did not form.
            self._recover_until_formed(state, _Regroup(f"mccl.elastic: generation {self.generation} did not form"))
        while True:
            stop = None
            try:
                if self.generation < 0:
                    self.join(state)
                if self._newcomer:
                    self._first_state(state)
                target = steps if self._end_at is None else min(steps, max(self._end_at, state.step))
                if state.step >= target:
                    return self._finish(state)
                if state.sharded and state.checkpoint_due():
                    state.save(meta=dict(self._meta(), kind="periodic"))
                t_step = time.perf_counter()
                micro = self.micro_batches()
                idx = state.sampler.indices(self.rank, self.world, micro, self._shares(state, micro))
                model = self.model(state)
                self._step_of_error = state.step
                loss = self._train(model, idx, micro, train_step)
                tb = time.perf_counter()
                leavers, joiners, end_at = self._boundary(state.step)()
                self.boundary_s.append(time.perf_counter() - tb)
                if end_at is not None:
                    self._end_at = end_at
                state.optimizer.step()  # waits for a background save's copy first (Keeping.periodic)
                state.optimizer.zero_grad(set_to_none=True)
                state.sampler.advance(self.world, micro)
                state.step += 1
                self.step = state.step
                self._step_times.append((time.perf_counter() - t_step, len(idx)))
                self._last_loss = _scalar(loss)
                if on_step is not None:
                    on_step(self, state, loss)
                if not state.sharded and self._durable.enabled:
                    # After on_step (it may change the parameters): the copy
                    # then overlaps the next step's forward and backward.
                    self._durable.periodic(state, self._meta)
                while leavers or joiners:
                    if self._end_at is not None and state.step >= min(steps, self._end_at):
                        joiners = 0  # the job ends here: nobody is admitted at its last boundary
                        if not leavers:
                            break
                    outcome = self._change(state, leavers, joiners)
                    if outcome == "left":
                        return "left"
                    # A change that admitted nobody (a leave, a refusal) may
                    # have waited: for the store, for the leaver. A joiner
                    # that asked meanwhile is taken now, by one more small
                    # all_reduce of the same members, not a step later.
                    # (After an admission the joiners start with a step.)
                    if outcome == "joined":
                        break
                    leavers, joiners, end_at = self._boundary(state.step, after_change=True)()
                    if end_at is not None:
                        self._end_at = end_at
                if self._fenced:
                    raise Excluded(f"mccl.elastic: {self.id}: the store holds a generation after {self.generation} "
                                   "that does not list this member: the job went on without it (it was cut off "
                                   "from the store for longer than timeout_s)")
                continue
            except _TrainStepError as e:
                if self._leaving_after(e):
                    return "left"
                log.error("mccl.elastic: train_step raised on this member at step %d (samples %s): %r",
                          state.step, e.samples, e.error)
                stop, failure = self._stop_error("train_step", e.error, e.samples), e.error
            except (dist.DistBackendError, RuntimeError, ValueError, _CheckpointException) as e:
                if isinstance(e, JobStopped) or not (self._is_comm_failure(e) or deterministic(e)):
                    raise
                if deterministic(e):
                    stop = self._stop_error("mismatch", e)
                failure = e
            if state.optimizer is not None:
                state.optimizer.zero_grad(set_to_none=True)
            if stop is not None:
                self._recover(state, failure, stop=stop)  # stops the job: raises JobStopped
            else:
                self._recover_until_formed(state, failure)

    def _leaving_after(self, e: "_TrainStepError") -> bool:
        """train_step failed on a member asked to leave (its agent's signal
        reached its data loader's workers too): it leaves now, the others
        recover as from a crash (one step). False when it was not leaving."""
        if not self._leave:
            return False
        log.warning("mccl.elastic: train_step raised while this member was leaving (%r): left", e.error)
        self._drop_group()
        return True

    def _train(self, model, idx: list[int], micro: int, train_step):
        """This member's forward and backward of the step: micro-batches
        under no_sync but the last. Samples train_step declares Unreadable
        are left out and the call is made again without them."""
        bal = self._balance if self._counts is not None else None
        if bal is not None:  # shares by speed: per-member micro-batches, each weighed by its samples
            bal.begin(model)
            micro = bal.micro_counts(self._counts, self._sampler_batch, bal.weights.sharded)[self.rank]
        chunks = sh.chunks(idx, micro)
        loss = None
        for i, part in enumerate(chunks):
            last = i == len(chunks) - 1
            while True:
                try:
                    with self._weighing(len(chunks[i])):
                        # FSDP2 by speed reduces every micro-batch: each has its own weight.
                        if last or (bal is not None and bal.weights.sharded):
                            loss = train_step(model, part)
                        else:
                            with _no_sync(model):
                                train_step(model, part)
                    break
                except Unreadable as u:
                    bad = [j for j in u.indices if j in part]
                    if not bad:
                        raise _TrainStepError(RuntimeError(f"train_step raised Unreadable({u.indices}) for samples "
                                                           f"this member does not hold ({part})"), part) from u
                    self.skipped.extend(bad)
                    log.warning("mccl.elastic: skipping unreadable sample(s) %s at step %d%s", bad,
                                self._step_of_error, f": {u.reason}" if u.reason else "")
                    part = [j for j in part if j not in bad]
                except (dist.DistBackendError, _CheckpointException):
                    raise
                except Exception as e:  # noqa: BLE001 - sorted: a comm failure, or the user's error
                    if self._is_comm_failure(e) or deterministic(e):
                        raise
                    raise _TrainStepError(e, part) from e
        if bal is not None:
            bal.end(len(idx))
        return loss

    # ---- shares by speed (balance.py) ----------------------------------------------
    def _shares(self, state, micro: int) -> list[int] | None:
        """Every member's samples for this step, from the speeds the
        members exchanged at the last boundary (kept in the sampler's state,
        so a joiner has them); None for the even split."""
        bal = self._balance
        if bal is None:
            return None
        bal.keep_in(state.sampler)
        total = state.sampler.step_size(self.world, micro)
        self._counts = bal.counts(total, self.record.members, key=self.generation)
        return self._counts

    def _weighing(self, part: int):
        """This member's gradient for a micro-batch of `part` samples, weighed
        so that the all-reduce gives the mean over the step's samples."""
        if self._balance is None or self._counts is None:
            return contextlib.nullcontext()
        return self._balance.weighing(part, sum(self._counts), self.world)

    def _heard(self, values: list[int]) -> None:
        """The members' speeds from the boundary; a straggler (under the
        policy) asks to leave at the next one."""
        why = self._balance.heard(values, self.record.members, self.rank)
        if why is not None:
            log.warning("mccl.elastic: member %s (rank %d) leaves at the next step boundary as a %s", self.id,
                        self.rank, why)
            self.request_leave()

    def _first_state(self, state) -> None:
        """A newcomer's first state: at a join, from rank 0, which sends it in
        _change (the other members only say they hold it); in a founding
        generation from its rank 0, and in a resuming one from rank 0 once it
        took the state from the checkpoint (both send it here). A failure
        here is recovered too."""
        rec = self.record
        t0 = time.monotonic()
        if state.sharded:
            if rec.cause is Cause.RESUME:
                state.restore()
            else:
                state.rebuild(state.initial() if self.generation == 0 and self.rank == 0 else None)
        else:
            if rec.cause is Cause.RESUME and self.rank == 0:
                self._take_up(state)
            self._deliver(state, holds=self._synced)
        self._newcomer, self._synced = False, True
        self.ready_s = time.monotonic() - self._join_t0
        log.warning("mccl.elastic: generation %d: this member %s job %r at step %d, ready %.2f s after it asked "
                    "to join (the state %.2f s of it)", self.generation,
                    "took up" if rec.cause is Cause.RESUME else "joined", self.members.job, state.step,
                    time.monotonic() - self._join_t0, time.monotonic() - t0)

    def _finish(self, state) -> str:
        """Every member reached the job's last step (the same boundary on
        all): the job ends; its record says so, at once, to anyone who comes
        later. Rank 0 saves the final state to the checkpoint folder (a
        sharded state: every rank its shards) and publishes the record
        naming it; `mccl elastic resume` can take the job up from there. The
        process group stays up for the caller."""
        t0 = time.monotonic()
        n, rec = self.generation, self.record
        name = ""
        if self._durable.enabled:
            try:
                name = self._durable.save_now(state, "final", self._meta())
            except Exception as e:  # noqa: BLE001 - the job ends all the same, without a final checkpoint
                log.error("mccl.elastic: saving the final state failed: %s", e)
        if self.rank == 0:
            self._publish(n + 1, Generation(members=(), admitted=rec.admitted, cause=Cause.END, step=state.step,
                                            incarnation=rec.incarnation, signature=rec.signature, checkpoint=name))
        # The record is out once this barrier ends (a rank 0 that dies before
        # writing it fails the barrier: recovered, and finished again).
        dist.barrier()
        self._note(Change(n + 1, "end", 0, left=list(rec.members), stall_s=time.monotonic() - t0, step=state.step))
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

    def _boundary(self, step: int, after_change: bool = False):
        """Starts the step's boundary: one small all_reduce of who asks to
        leave, (rank 0) how many joiners wait and at which step the job was
        asked to end, and (shares by speed) every member's time per sample.
        Issued when the step's compute is done (its gradients reduced), so a
        joiner or a leave seen during the step is acted on at its end, and
        the step's own times set the next step's shares; it costs one small
        all_reduce's latency per step (docs/benchmarks.md, the step-boundary
        check). Returns a function that waits for it and gives (leaver ranks,
        joiners, end step or None).

        `after_change`: the boundary that follows a change which admitted
        nobody. Rank 0 then counts the requests in the store itself, not
        through its watcher's last look (up to 0.2 s old), and if the store
        came back from an outage less than AFTER_OUTAGE_S ago it waits up to
        the rest of that for a request: joiners that the outage held back
        ask within about 0.2 s of its end, and are taken now instead of a
        step later."""
        world = self.world
        self._watch()
        speeds = world if self._balance is not None else 0  # shares by speed: every member's ns per sample
        flags = torch.zeros(world + 2 + speeds, dtype=torch.int64)
        if speeds:
            flags[world + 2 + self.rank] = self._balance.estimate.ns
        if self._leave:
            flags[self.rank] = 1
        if self.rank == 0:
            if after_change:
                flags[world] = max(0, self._requests_now() - self.record.admitted)
            elif step % self.check_every == 0:
                flags[world] = max(0, self._requests() - self.record.admitted)
            end = self._watcher.end_step if self._watcher is not None else self.members.end_request()
            if end is not None:
                flags[world + 1] = max(end, step + 1) + 1  # -1 (at once): after this step
        work = dist.all_reduce(flags, async_op=True)

        def result():
            work.wait()
            if speeds:
                self._heard(flags[world + 2:].tolist())
            end_at = int(flags[world + 1]) - 1
            return [r for r in range(world) if flags[r]], int(flags[world]), end_at if end_at >= 0 else None

        return result

    def _requests(self) -> int:
        """Join requests so far, as rank 0 last saw them. The watcher thread
        looks every 0.2 s, so a step boundary never waits for the store;
        where the store cannot be cloned, the boundary asks it."""
        if self._watcher is None:
            return self.members.requests()
        return self._watcher.requests

    def _requests_now(self) -> int:
        """Join requests as the store holds them now (see _boundary's
        after_change), counting only whole ones (a joiner registers its
        number first, then its request and heartbeat: one caught in between
        would be passed over and have to ask again). Within AFTER_OUTAGE_S of
        a store outage's end it waits for a request to appear, up to that
        bound. The watcher's count if the store does not answer. (The change
        just before it called the store too: this adds a few calls to a
        store that answered a moment ago.)"""
        health, m = self.members.store.health, self.members
        if health.away:
            return self._requests()
        until = health.back_at + AFTER_OUTAGE_S if health.back_at is not None else 0.0
        admitted = self.record.admitted
        try:
            while True:
                n = m.requests(patience=0.5)
                whole = n <= admitted or (m.has(f"join/{n}", patience=0.5) and m.has(f"hb/{n}", patience=0.5))
                if (n > admitted and whole) or time.monotonic() >= until:
                    return n if whole else n - 1
                time.sleep(0.02)
        except Exception:  # noqa: BLE001 - the store could not say: the watcher's last look
            return self._requests()

    def _watch(self) -> None:
        """Starts this member's watcher thread (watcher.py) if it has none and
        the store can be cloned."""
        if self._watcher is not None or self._closing or not self.members.store.can_clone:
            return
        self._watcher = Watcher(self)
        self._watcher.start()
        # A daemon thread that Python's exit finds inside a store call is
        # ended by a forced unwind through torch's C++ frames, which aborts
        # the process ("terminate called without an active exception").
        atexit.register(self.close)

    def close(self) -> None:
        """Stops the thread that watches the store and the beacon, and waits
        for a background checkpoint in flight (run at exit too)."""
        self._closing = True
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop(2.0)
        self._durable.close()
        self._beacon.close()

    # ---- status for the fleet's page -----------------------------------------------
    def _publish_status(self, m: Membership, tick: int) -> None:
        """From the watcher thread: this member's status (every member) and
        the job's (rank 0) for the fleet's status page (dashboard/publish.py
        says what and how): at most every 2 s, less often while the store is
        slow, never while it is away. Each value is under 400 bytes; a write
        that fails is dropped (the watcher gives it up at once)."""
        from .dashboard import keys, publish
        rec, now = self.record, time.monotonic()
        if now < self._status_at or rec is None or self.id not in rec.members or m.store.health.away:
            return
        self._status_at = now + publish.STATUS_EVERY_S
        t0 = time.perf_counter()
        mine = publish.member_status(self, rec.members.index(self.id))
        m.set(f"status/m/{self.id}", keys.dumps(mine))
        if mine["rank"] == 0:
            m.set("status/job", keys.dumps(publish.job_status(self, mine)))
        self._status_at = now + max(publish.STATUS_EVERY_S, publish.SLOW_FACTOR * (time.perf_counter() - t0))
