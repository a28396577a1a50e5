"""The night of a job, as the coordinator saw it: one sample every
`every_s` (default 10 s) for `keep_s` (default 24 h), in a bounded ring.

A sample is (time, samples/s, members, step, loss). The page gets at most
`points` of them: the ring is cut into equal spans of time and each span
gives its mean throughput, its smallest world (a dip is what one looks
for), its last step and its last loss.
"""

from __future__ import annotations

import collections


class Series:
    def __init__(self, every_s: float = 10.0, keep_s: float = 86400.0):
        self.every_s = every_s
        self.ring: collections.deque = collections.deque(maxlen=max(2, int(keep_s / every_s)))
        self._last = -1e18

    def offer(self, t: float, samples_per_s: float | None, world: int, step: int | None,
              loss: float | None) -> bool:
        """Keeps the sample if `every_s` passed since the last one kept."""
        if t - self._last < self.every_s * 0.999:
            return False
        self._last = t
        self.ring.append((round(t, 1), samples_per_s, world, step, loss))
        return True

    def points(self, limit: int = 240) -> list[list]:
        data = list(self.ring)
        if len(data) <= limit:
            return [list(p) for p in data]
        t0, t1 = data[0][0], data[-1][0]
        span = (t1 - t0) / limit or 1.0
        out, bucket, edge = [], [], t0 + span
        for p in data:
            if p[0] > edge and bucket:
                out.append(_merge(bucket))
                bucket = []
                while p[0] > edge:
                    edge += span
            bucket.append(p)
        if bucket:
            out.append(_merge(bucket))
        return out


def _merge(ps: list[tuple]) -> list:
    rates = [p[1] for p in ps if p[1] is not None]
    return [ps[-1][0], round(sum(rates) / len(rates), 2) if rates else None, min(p[2] for p in ps),
            ps[-1][3], ps[-1][4]]
