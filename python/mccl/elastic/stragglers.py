"""When a member that shares by speed is so slow that it should go.

Shares re-balance a slow member within a few steps: it gets fewer samples
and stops holding the others back. A member that stays far slower per
sample than the median member (its person is rendering on it) still costs
the group its share of the all-reduce and its one-sample minimum; under a
StragglerPolicy it is asked to leave, as a graceful leave (its own
request_leave, at the next boundary), and its agent may start it again
later.

    Job(..., shares="speed", straggler=StragglerPolicy(max_slowdown=3.0, patience_steps=50))

Every member sees the same times at every boundary; each decides only for
itself (the decision is a pure function of those times and the count of
boundaries it has been over the limit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .shares import filled


@dataclass(frozen=True)
class StragglerPolicy:
    """`max_slowdown`: a member whose time per sample is more than this many
    times the median member's (the faster middle one for an even count) is
    over the limit. `patience_steps`: consecutive boundaries over the limit
    before it is asked to leave. `min_members`: never leave fewer members
    than this (the slowest go first when several are over)."""
    max_slowdown: float = 3.0
    patience_steps: int = 50
    min_members: int = 1

    def __post_init__(self):
        if not self.max_slowdown > 1 or self.patience_steps < 1 or self.min_members < 1:
            raise ValueError(f"mccl.elastic.StragglerPolicy: max_slowdown ({self.max_slowdown}) must be above 1, "
                             f"patience_steps ({self.patience_steps}) and min_members ({self.min_members}) at "
                             f"least 1")


def slowdowns(times: Sequence[int]) -> list[float]:
    """Each member's time per sample over the median member's (1.0 for the
    median; unmeasured members count as the median)."""
    t = filled(times)
    ref = sorted(t)[(len(t) - 1) // 2]
    return [ti / ref for ti in t]


def over(policy: StragglerPolicy, times: Sequence[int]) -> list[int]:
    """Ranks over the limit that may leave now (slowest first), so that at
    least policy.min_members stay."""
    s = slowdowns(times)
    bad = sorted((r for r in range(len(s)) if s[r] > policy.max_slowdown), key=lambda r: (-s[r], r))
    return bad[:max(0, len(s) - policy.min_members)]


class StragglerWatch:
    """This member's count of consecutive boundaries over the limit."""

    def __init__(self, policy: StragglerPolicy):
        self.policy = policy
        self.count = 0
        self.slowdown = 1.0
        self.decided: str | None = None

    def heard(self, times: Sequence[int], rank: int) -> str | None:
        """After a boundary: the reason to leave (once), or None."""
        if self.decided is not None or len(times) < 2:
            return None
        self.slowdown = slowdowns(times)[rank]
        self.count = self.count + 1 if rank in over(self.policy, times) else 0
        if self.count < self.policy.patience_steps:
            return None
        self.decided = (f"straggler: {self.slowdown:.1f}x the median member's time per sample for "
                        f"{self.count} steps (policy: max_slowdown {self.policy.max_slowdown:g}, "
                        f"patience_steps {self.policy.patience_steps})")
        return self.decided

    def note(self) -> str | None:
        """For the status page: None while this member is within the limit."""
        if self.decided is not None:
            return "leaving: " + self.decided
        if self.count == 0:
            return None
        return f"{self.slowdown:.1f}x the median for {self.count}/{self.policy.patience_steps} steps"
