"""The pure parts of DiLoCo on an elastic fleet: when each fragment's outer
sync is issued and applied within a round of H inner steps (Schedule), and
which samples each member trains at each inner step of a round (RoundPlan).
Nothing here touches a group, a store or a clock; diloco.py and
diloco_loop.py act on what these say, and tests/python/test_diloco.py checks
them without processes.

A round is H inner steps. Its points are 0..H: point j is after j inner
steps. Fragment p (of P) is applied at point a_p = round((p + 1) H / P) (so
the last fragment at H, the round's end) and issued tau inner steps before,
at i_p = a_p - tau: its all-reduce runs while the member trains those tau
steps (tau = 0: the sync blocks, as in DiLoCo; tau = a_p - a_(p-1), the
default with P > 1: each fragment's all-reduce has the whole gap until the
next one is issued). At a point, a fragment issued earlier is applied first,
then fragments are issued, then those issued at this very point (tau = 0)
applied. At the round's end no all-reduce is in flight: that is where
members may leave and join.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .sampler import ElasticSampler


@dataclass(frozen=True)
class Schedule:
    H: int
    fragments: int = 1
    overlap: int | None = None  # inner steps each fragment's all-reduce overlaps; None: the default

    def __post_init__(self):
        if self.H < 1 or not 1 <= self.fragments <= self.H:
            raise ValueError(f"mccl.elastic.DiLoCo: H ({self.H}) must be at least 1 and fragments "
                             f"({self.fragments}) between 1 and H")
        gap = self.gap
        tau = self.tau
        if not 0 <= tau <= gap:
            raise ValueError(f"mccl.elastic.DiLoCo: overlap {tau} must be between 0 and {gap} inner steps (H / "
                             f"fragments, rounded down: a fragment's all-reduce must end before the next is issued)")

    @property
    def gap(self) -> int:
        """The fewest inner steps between two fragments' applications."""
        return min(b - a for a, b in zip([0] + self.applies[:-1], self.applies))

    @property
    def tau(self) -> int:
        if self.overlap is not None:
            return self.overlap
        return 0 if self.fragments == 1 else self.gap

    @property
    def applies(self) -> list[int]:
        return [int(round((p + 1) * self.H / self.fragments)) for p in range(self.fragments)]

    @property
    def issues(self) -> list[int]:
        return [a - self.tau for a in self.applies]

    def events(self, j: int) -> list[tuple[str, int]]:
        """What happens at point j: ("apply", p) and ("issue", p), in order."""
        a, i = self.applies, self.issues
        out = [("apply", p) for p in range(self.fragments) if a[p] == j and i[p] < j]
        out += [("issue", p) for p in range(self.fragments) if i[p] == j]
        out += [("apply", p) for p in range(self.fragments) if a[p] == j and i[p] == j]
        return out


def split(numels: list[int], fragments: int) -> list[list[tuple[int, int, int]]]:
    """The model's flattened trainable parameters (their element counts, in
    order) cut into `fragments` contiguous slices of about equal size; each
    fragment is a list of (parameter index, start, end) pieces. A parameter
    may be cut between fragments (a model that is one big tensor streams
    too)."""
    total = sum(numels)
    if fragments > max(1, total):
        raise ValueError(f"mccl.elastic.DiLoCo: {fragments} fragments of {total} parameters")
    bounds = [total * f // fragments for f in range(fragments + 1)]
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(fragments)]
    offset = 0
    for i, n in enumerate(numels):
        for f in range(fragments):
            lo, hi = max(bounds[f], offset), min(bounds[f + 1], offset + n)
            if lo < hi:
                out[f].append((i, lo - offset, hi - offset))
        offset += n
    return out


class RoundPlan:
    """The samples of one round: H inner steps of `world` members, `batch`
    each, taken in order from a stream that is first the samples owed by
    earlier rounds (trained by members that died before their work reached
    an outer step), then the sampler's permutations, epoch after epoch.
    Member r (its index in the round's member list) trains
    slot(k, r) at inner step k. Every member computes the same plan from
    the same committed data state.

    Each sample carries its epoch, so "within an epoch no sample is seen
    twice or dropped" holds with the owed ones trained later: a sample of
    epoch e is contributed to an outer step exactly once."""

    def __init__(self, sampler: ElasticSampler, owed: list[tuple[int, int]], world: int, H: int):
        self.world, self.H, self.batch = world, H, sampler.batch
        want = H * world * self.batch
        take_owed = owed[:want]
        self.rest_owed = list(owed[len(take_owed):])
        s = ElasticSampler(sampler.dataset_len, sampler.batch, seed=sampler.seed, shuffle=sampler.shuffle)
        s.load_state_dict(sampler.state_dict())
        epochs, idx = [e for e, _ in take_owed], [i for _, i in take_owed]
        need = want - len(idx)
        while need > 0:
            got = s.indices(0, 1, micro=math.ceil(need / s.batch))[:need]
            epochs += [s.state.epoch] * len(got)
            idx += got
            need -= len(got)
            pos = s.state.position + len(got)
            s.load_state_dict({"epoch": s.state.epoch + (pos >= s.dataset_len),
                               "position": pos if pos < s.dataset_len else 0})
        # The sampler's state once this round is trained (what else it keeps, as it was).
        self.after = dict(sampler.state_dict(), epoch=s.state.epoch, position=s.state.position)
        self.idx = torch.tensor(idx, dtype=torch.int64).view(H, world, self.batch)
        self.epoch = torch.tensor(epochs, dtype=torch.int64).view(H, world, self.batch)

    def slot(self, k: int, r: int) -> list[int]:
        return self.idx[k, r].tolist()

    def owed_after(self, dead: list[int]) -> list[tuple[int, int]]:
        """The owed samples once this round is committed with the members of
        round ranks `dead` lost: what was owed and not taken, then every
        sample the dead trained this round (in step, then rank order)."""
        out = list(self.rest_owed)
        for k in range(self.H):
            for r in sorted(dead):
                out += list(zip(self.epoch[k, r].tolist(), self.idx[k, r].tolist()))
        return out
