"""FSDP2's collectives for shares by speed (speed.py says why): a
reduce-scatter that weighs this member's gradient by its share, and both
that and the all-gather waited for here and timed, so that the member's
compute time can be told from the time it waits for the others.

Waiting synchronously gives up FSDP2's overlap of the next module's
all-gather with this one's compute: the price of knowing the compute time
on a device whose work the host cannot otherwise observe.

A group of one member makes no reduce-scatter call (FSDP2 copies the
gradient instead): the weight is then applied after the reduction, in the
FSDP module's all-reduce hook (FSDPModule.set_all_reduce_hook), which
FSDP2 calls after every reduction, reduce-scatter or not."""

from __future__ import annotations

import time

# Only imported where FSDPModule.set_custom_reduce_scatter exists (speed.py checks).
from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter


class WeightedReduceScatter(DefaultReduceScatter):
    def __init__(self, weights):
        super().__init__()
        self.weights = weights

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        f = self.weights.factor
        scale(input_tensor, f)
        self.weights.scattered = True
        t0 = time.perf_counter()
        work = super().__call__(output_tensor, input_tensor, group, op, async_op=True)
        if work is not None:
            work.wait()
        self.weights.comm_s += time.perf_counter() - t0
        return work if async_op else None


def scale(t, f: float) -> None:
    """t *= f in place; a factor of 0 (a micro-batch without samples) gives
    zeros even where its gradient is not finite."""
    if f == 0.0:
        t.zero_()
    elif f != 1.0:
        t.mul_(f)


class WeighAfterReduce:
    """The all-reduce hook: weighs a reduction that made no reduce-scatter
    call (a group of one); after one that did, only clears the mark."""

    def __init__(self, weights):
        self.weights = weights

    def __call__(self, output) -> None:
        if not self.weights.scattered:
            scale(output, self.weights.factor)
        self.weights.scattered = False


class TimedAllGather(DefaultAllGather):
    def __init__(self, weights):
        super().__init__()
        self.weights = weights

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        t0 = time.perf_counter()
        work = super().__call__(output_tensor, input_tensor, group, async_op=True)
        if work is not None:
            work.wait()
        self.weights.comm_s += time.perf_counter() - t0
        return work if async_op else None
