"""How many of a step's samples each member trains: in proportion to its
speed. Pure functions of integers, so that every member, given the same
inputs, computes the same shares (no floating point in the split).

    split(128, [40_000, 40_000, 20_000, 10_000])   # ns per sample of ranks 0-3
    -> [16, 16, 32, 64]

The rules, in order:

- a member's weight is 1 / (its time per sample), as the integer
  2**62 // time; a member not measured yet (time 0) counts as the median
  member (of those measured; for an even count, the slower of the two
  middle ones); when nobody is measured every member counts the same,
  which is today's equal split;
- with at least one sample per member (total >= world), every member gets
  at least one: members whose proportional quota is under one get exactly
  one, and the rest is shared among the others in proportion again;
- with fewer samples than members (the epoch's short last step), the
  fastest `total` members get one each and the others none;
- the rest is rounded by largest remainder: each member gets the floor of
  its quota, and the samples left go one each to the largest remainders;
  ties go to the lower rank. Equal times therefore give exactly the split
  ElasticSampler makes without shares (the first `total % world` ranks get
  one more).

`keep(current, fresh, times, tolerance)` is the hysteresis a running job
applies: the current shares stay unless the fresh ones shorten the step
(the slowest member's n * time) by more than `tolerance`, so that noise in
the measurements does not move samples back and forth.
"""

from __future__ import annotations

from typing import Sequence


def filled(times: Sequence[int]) -> list[int]:
    """`times` (ns per sample, 0 = not measured yet) with the unmeasured
    ones set to the median of the measured (the slower middle one for an
    even count); all ones when nobody is measured."""
    known = sorted(int(t) for t in times if t > 0)
    if not known:
        return [1] * len(times)
    median = known[len(known) // 2]
    return [int(t) if t > 0 else median for t in times]


def split(total: int, times: Sequence[int]) -> list[int]:
    """The shares of `total` samples for members whose time per sample is
    `times` (rank order; module doc for the rules). Sums to `total`."""
    world = len(times)
    if world == 0:
        raise ValueError("mccl.elastic.shares.split: no members")
    if total < 0:
        raise ValueError(f"mccl.elastic.shares.split: total {total} is negative")
    if any(t < 0 for t in times):
        raise ValueError(f"mccl.elastic.shares.split: negative time per sample in {list(times)}")
    t = filled(times)
    if total < world:
        fastest = sorted(range(world), key=lambda r: (t[r], r))[:total]
        return [1 if r in fastest else 0 for r in range(world)]
    # Integer weights (2**62 // time): exact arithmetic with small numbers,
    # the same on every machine.
    w = [(1 << 62) // ti for ti in t]
    out = [0] * world
    active = list(range(world))
    left = total
    while True:
        weight = sum(w[r] for r in active)
        small = [r for r in active if left * w[r] < weight]  # a quota under one sample
        if not small:
            break
        for r in small:  # at least one sample each; the rest again in proportion
            out[r] = 1
            left -= 1
            active.remove(r)
    rem = {}
    for r in active:
        out[r], rem[r] = divmod(left * w[r], weight)
    rest = left - sum(out[r] for r in active)
    for r in sorted(active, key=lambda r: (-rem[r], r))[:rest]:
        out[r] += 1
    return out


def step_time(shares: Sequence[int], times: Sequence[int]) -> int:
    """The step's predicted compute time (ns): its slowest member's."""
    t = filled(times)
    return max((n * ti for n, ti in zip(shares, t)), default=0)


def keep(current: Sequence[int] | None, fresh: Sequence[int], times: Sequence[int], tolerance: float) -> bool:
    """Whether a running job keeps `current` rather than moving to `fresh`:
    `current` is for the same members and total, and `fresh` would not
    shorten the step by more than `tolerance` (a fraction)."""
    if current is None or len(current) != len(fresh) or sum(current) != sum(fresh):
        return False
    if sum(fresh) >= len(fresh) and min(current) < 1:
        return False  # the one-sample minimum holds for current shares too
    return step_time(current, times) <= (1 + tolerance) * step_time(fresh, times)


def micro_counts(shares: Sequence[int], batch: int, common: bool = False) -> list[int]:
    """Micro-batches per member: enough that none holds more than `batch`
    samples (at least one, so that every member takes part in the step's
    gradient reduction). `common`: every member runs the most any member
    needs (FSDP2, where every micro-batch is a sequence of collectives)."""
    if batch < 1:
        raise ValueError(f"mccl.elastic.shares.micro_counts: batch {batch} must be positive")
    counts = [max(1, -(-n // batch)) for n in shares]
    return [max(counts)] * len(counts) if common else counts


def chunks(idx: list, micro: int) -> list[list]:
    """A member's samples in `micro` micro-batches (sizes differ by at most
    one, in the sampler's order strided as Job has always done)."""
    return [idx[i::micro] for i in range(micro)] if micro > 1 else [list(idx)]


def factor(part: int, total: int, world: int) -> float:
    """What a member multiplies the gradient of a micro-batch of `part`
    samples (a mean over them) by, before an all-reduce that averages over
    `world` members: the result is the mean over the step's `total`."""
    return world * part / total if total else 0.0
