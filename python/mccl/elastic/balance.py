"""Shares of each step's samples in proportion to each member's speed: the
part of Job(shares="speed") that also serves a plain torch.distributed DDP
loop.

    bal = mccl.elastic.Balancer()                  # every rank of the default group
    model = DDP(net)
    for step in range(steps):
        counts = bal.counts(total)                 # the same list on every rank
        lo = pos + sum(counts[:rank])
        mine = order[lo:lo + counts[rank]]         # this rank's contiguous slice of the step's samples
        with bal.step(model, counts):              # weighs the gradient by counts[rank] / total, times the compute
            loss_fn(model(x[mine]), y[mine]).backward()   # the loss: a mean over this rank's samples
        bal.exchange()                             # one small all_reduce: every rank's speed, for the next counts
        optimizer.step(); optimizer.zero_grad()
        pos += total

One step of it:
  1. counts: shares.split of the step's samples by the members' times per
     sample as last exchanged (the same on every rank); while the members
     and the total stay the same, the current counts are kept unless the new
     ones would shorten the step by more than `tolerance` (5 %);
  2. step(): this rank's gradient is multiplied by world * counts[rank] /
     total before the all-reduce (in a DDP comm hook that DDP calls per
     bucket), so the average is the gradient of the mean over all the
     step's samples; when the last bucket was ready is this rank's compute
     time (speed.py);
  3. exchange(): each rank's estimate (speed.SpeedEstimate, integer ns per
     sample) goes around in one int64 all_reduce. A Job puts the estimates
     in the step boundary's all_reduce instead (no extra op), and keeps them
     in the sampler's state by member id, so that a joiner receives them with
     the model and the shares of a new generation are balanced from its
     first step; a member not measured yet counts as the median one.
"""

from __future__ import annotations

import contextlib
import time
from typing import Hashable, Sequence

import torch
import torch.distributed as dist

from . import shares as sh
from .speed import GradWeights, SpeedEstimate
from .stragglers import StragglerPolicy, StragglerWatch


class Balancer:
    def __init__(self, *, tolerance: float = 0.05, alpha: float = 0.3, jump: float = 1.5,
                 straggler: StragglerPolicy | None = None, group=None):
        if tolerance < 0:
            raise ValueError(f"mccl.elastic.Balancer: tolerance {tolerance} must not be negative")
        self.tolerance = tolerance
        self.estimate = SpeedEstimate(alpha, jump)
        self.weights = GradWeights()
        self.group = group
        self.watch = StragglerWatch(straggler) if straggler is not None else None
        self._table: dict = {}       # member -> ns per sample (a Job keeps it in its sampler instead)
        self._sampler = None
        self._current: tuple | None = None   # (key, counts): what the last step used
        self.share: int | None = None        # this member's samples in the last step
        self.counts_used: list[int] | None = None
        self._t0 = 0.0
        self._unmeasured = 0  # steps left before the current model's are measured

    # ---- the table of speeds -----------------------------------------------------
    @property
    def table(self) -> dict:
        return self._sampler.state.speeds if self._sampler is not None else self._table

    def keep_in(self, sampler) -> None:
        """Keeps the table in `sampler`'s state (ElasticSampler: it travels to
        joiners and into checkpoints with the data position)."""
        self._sampler = sampler

    def times(self, ids: Sequence[Hashable]) -> list[int]:
        return [int(self.table.get(i, 0)) for i in ids]

    def heard(self, values: Sequence[int], ids: Sequence[Hashable], rank: int) -> str | None:
        """Every member's estimate (0: none yet), in rank order, as the
        exchange delivered it: the table keeps the members' latest. Returns
        the reason for this member to leave as a straggler, once."""
        table, members = self.table, set(ids)
        for i, v in zip(ids, values):
            if int(v) > 0:
                table[i] = int(v)
        for gone in [k for k in table if k not in members]:
            del table[gone]
        if self.watch is None:
            return None
        return self.watch.heard(self.times(ids), rank)

    # ---- a step ---------------------------------------------------------------------
    def counts(self, total: int, ids: Sequence[Hashable] | None = None, key: Hashable = None) -> list[int]:
        """The step's shares of `total` samples, in rank order of `ids`
        (default: the group's ranks). `key` names the membership (a Job's
        generation): the current counts are only kept within one."""
        if ids is None:
            ids = list(range(dist.get_world_size(self.group)))
        times = self.times(ids)
        fresh = sh.split(total, times)
        cur = self._current
        if cur is not None and cur[0] == (key, tuple(ids), total) and sh.keep(cur[1], fresh, times, self.tolerance):
            out = list(cur[1])
        else:
            out = fresh
        self._current = ((key, tuple(ids), total), tuple(out))
        self.counts_used = out
        return out

    def micro_counts(self, counts: Sequence[int], batch: int, sharded: bool) -> list[int]:
        return sh.micro_counts(counts, batch, common=sharded)

    def begin(self, model: torch.nn.Module) -> None:
        """Before this member's first forward of the step."""
        if self.weights.attach(model):
            # A new model (DDP wrapper, FSDP2 build): its first two steps are
            # not measured. They include one-time work, and DDP's second
            # iteration waits for every member (it rebuilds its buckets
            # from rank 0's order): a fast member would look slow.
            self._unmeasured = 2
        self.weights.new_step()
        self._t0 = time.perf_counter()

    def end(self, samples: int) -> None:
        """After its last backward: the compute time goes into the estimate."""
        w = self.weights
        now = time.perf_counter()
        if w.sharded:
            seconds = now - self._t0 - w.comm_s
        else:
            seconds = (w.last_grad_t or now) - self._t0
        if self._unmeasured > 0:
            self._unmeasured -= 1
        else:
            self.estimate.add(seconds, samples)
        self.share = samples

    def weighing(self, part: int, total: int, world: int):
        return self.weights.weighing(sh.factor(part, total, world))

    @contextlib.contextmanager
    def step(self, model: torch.nn.Module, counts: Sequence[int]):
        """A plain loop's forward and backward of this rank's counts[rank]
        samples in one micro-batch (module doc)."""
        rank, world = dist.get_rank(self.group), dist.get_world_size(self.group)
        self.begin(model)
        with self.weighing(counts[rank], sum(counts), world):
            yield
        self.end(counts[rank])

    def exchange(self) -> str | None:
        """Every rank's estimate to every rank (one int64 all_reduce of
        world slots). Returns the reason for this rank to stop as a
        straggler (with a policy), else None."""
        rank, world = dist.get_rank(self.group), dist.get_world_size(self.group)
        slots = torch.zeros(world, dtype=torch.int64)
        slots[rank] = self.estimate.ns
        dist.all_reduce(slots, group=self.group)
        return self.heard(slots.tolist(), list(range(world)), rank)

    def status(self) -> tuple[int | None, str | None]:
        """(this member's samples in the last step, its straggler note)."""
        return self.share, self.watch.note() if self.watch is not None else None
