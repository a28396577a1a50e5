"""The data order of an elastic job: exact per epoch whatever the membership.

Each epoch is one permutation of the dataset's indices (seeded, the same on
every member). A step hands out the next ``batch x world`` indices of it,
``batch`` to each member, in rank order; the position (how many indices of
the epoch are consumed) is part of the job's live state, so a joiner starts
where the members are. When the membership changes, the rest of the epoch is
split among the new members from that position on: within an epoch no index
is dropped or seen twice. The epoch's last step may be short: its remaining
indices are split as evenly as the members allow (some get one fewer).

With shares (Job(shares="speed"): shares.split, in proportion to each
member's speed), member r takes shares[r] indices of the step instead,
the contiguous slice after those of ranks 0..r-1; the step takes as many
indices as without shares, so the data order and the steps stay the same
and only who trains which sample changes. The members' measured speeds
(`speeds`: member id -> ns per sample) are kept here, with the position,
so that they travel to joiners and into checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SamplerState:
    epoch: int = 0
    position: int = 0  # indices of this epoch already handed out
    speeds: dict = field(default_factory=dict)  # member id -> its time per sample (ns), for shares by speed


class ElasticSampler:
    """Indices for one member per step: ``sampler.indices(rank, world)`` then
    ``sampler.advance(world)`` once the step is done (every member the same)."""

    def __init__(self, dataset_len: int, batch: int, seed: int = 0, shuffle: bool = True):
        if dataset_len <= 0 or batch <= 0:
            raise ValueError(f"ElasticSampler: dataset_len ({dataset_len}) and batch ({batch}) must be positive")
        self.dataset_len, self.batch, self.seed, self.shuffle = dataset_len, batch, seed, shuffle
        self.state = SamplerState()
        self._perm_epoch = -1
        self._perm = None

    def _order(self) -> torch.Tensor:
        if self._perm_epoch != self.state.epoch:
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.state.epoch)
                self._perm = torch.randperm(self.dataset_len, generator=g)
            else:
                self._perm = torch.arange(self.dataset_len)
            self._perm_epoch = self.state.epoch
        return self._perm

    def step_size(self, world: int, micro: int = 1) -> int:
        """Indices the next step takes from the epoch (all members together,
        `micro` micro-batches each when gradients are accumulated)."""
        return min(self.batch * world * micro, self.dataset_len - self.state.position)

    def indices(self, rank: int, world: int, micro: int = 1, shares: list[int] | None = None) -> list[int]:
        """This member's indices for the current step (all its micro-batches).
        `shares`: every member's count (rank order, summing to step_size), or
        None for the even split."""
        if not 0 <= rank < world:
            raise ValueError(f"ElasticSampler: rank {rank} is outside a world of {world}")
        take = self.step_size(world, micro)
        if shares is None:
            base, extra = divmod(take, world)
            start = self.state.position + rank * base + min(rank, extra)
            n = base + (1 if rank < extra else 0)
        else:
            if len(shares) != world or sum(shares) != take or min(shares) < 0:
                raise ValueError(f"ElasticSampler: shares {list(shares)} must be {world} counts, none negative, "
                                 f"summing to the step's {take} samples")
            start = self.state.position + sum(shares[:rank])
            n = shares[rank]
        return self._order()[start:start + n].tolist()

    def advance(self, world: int, micro: int = 1) -> None:
        """The step is done on every member: move past its indices."""
        self.state.position += self.step_size(world, micro)
        if self.state.position >= self.dataset_len:
            self.state.epoch += 1
            self.state.position = 0

    def state_dict(self) -> dict:
        d = {"epoch": self.state.epoch, "position": self.state.position}
        if self.state.speeds:
            d["speeds"] = dict(self.state.speeds)
        return d

    def load_state_dict(self, d: dict) -> None:
        self.state = SamplerState(epoch=int(d["epoch"]), position=int(d["position"]),
                                  speeds={k: int(v) for k, v in d.get("speeds", {}).items()})
