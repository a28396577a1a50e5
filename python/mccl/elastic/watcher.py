"""The thread of a member that watches the job's store, so that the training
loop never waits for it.

Every 0.2 s, on its own connection to the store:
- while this member is rank 0: it counts the join requests and watches their
  heartbeats, and reads whether the job was asked to end (both read at the
  next step boundary);
- while it is one of the first three ranks: it rewrites the job's heartbeat
  about once a second (a joiner waits while that moves; three, so that one
  dying leaves the beat going), also while the member is stuck in a
  collective;
- every member: while the store is away it looks for it at every tick; when
  its connection to the store was made anew (the store went away and came
  back) and about every 2 s otherwise, it checks that the store still holds
  the member's generation, and writes back what a store that restarted
  empty lost (Membership.reseed);
- it publishes the member's status for the fleet's status page (rate-limited;
  the first thing dropped when the store is slow or away);
- about every 2 s it looks whether the job went on without this member (a
  newer generation that does not list it, there for longer than any change
  takes): then the loop stops at its next boundary.

No store error reaches the training loop from here: a call that fails is
given up at once (the store's outage is logged once, by store.py) and tried
again at the next tick.
"""

from __future__ import annotations

import logging
import threading
import time

from .membership import Membership
from .store import StoreAway

log = logging.getLogger("mccl.elastic")

TICK_S = 0.2
# A newer generation without this member, there at least this long (and
# timeout_s): the job went on without it.
FENCE_MIN_S = 10.0


class Watcher:
    def __init__(self, job):
        self.job = job
        store = job.members.store.clone()
        store.patience = 0.0  # a call that fails is given up at once: next tick
        self.members = Membership(store, job.members.job)
        self.requests = 0
        self.end_step: int | None = None
        self.reseeds = 0
        self._newer_since: tuple[int, float] | None = None  # (generation, when g/<n+1> was first seen)
        self._stop = False
        self._epoch = -1
        self._thread = threading.Thread(target=self._loop, name="mccl-elastic-watch", daemon=True)

    def start(self) -> None:
        try:
            self.requests = self.members.requests()
        except StoreAway:
            pass
        self._thread.start()

    def stop(self, wait_s: float) -> None:
        self._stop = True
        self.members.store.closing = True
        self._thread.join(timeout=wait_s)

    def _loop(self) -> None:
        tick = 0
        while not self._stop:
            try:
                self._tick(tick)
            except StoreAway:
                pass  # logged once by the store; next tick
            except Exception as e:  # noqa: BLE001 - a generation is changing under us: next tick
                log.debug("mccl.elastic: watcher: %s", e)
            tick += 1
            time.sleep(TICK_S)

    def _tick(self, tick: int) -> None:
        job, m = self.job, self.members
        n, rec = job._current
        rank = rec.members.index(job.id) if rec is not None and job.id in rec.members else -1
        if rank < 0 or not rec.live:
            return
        if m.store.health.away:
            # This process's store is away: look for it at every tick (a probe
            # that is refused at once while nothing listens), so that a store
            # that came back empty is written back within a tick, not at this
            # member's next call of its own.
            m.has(f"g/{n}")
        fresh = m.store.epoch != self._epoch
        if tick % 10 == 0:
            self._fence(n, m)
        if rank == 0:
            self.requests = m.requests()
            job._beats.observe(m, rec.admitted + 1, self.requests)
        # A new connection (the store may have restarted empty): write back
        # what it lost; about every 2 s otherwise: see that it still holds it.
        if (fresh or (tick % 10 == 0 and not m.has(f"g/{n}"))) and \
                m.reseed(n, rec, job.id, job._beacon_address, job._sig_lines):
            self.reseeds += 1
            job._beats.forget()
            log.warning("mccl.elastic: the store had lost generation %d of job %r (it restarted empty): "
                        "written back by this member", n, m.job)
        self._epoch = m.store.epoch
        if 0 <= rank < 3 and tick % 5 == 0:
            m.job_beat()
        if rank == 0:
            self.end_step = m.end_request()
        job._publish_status(m, tick)

    def _fence(self, n: int, m: Membership) -> None:
        """A generation after this member's that does not list it, there for
        longer than any change takes: the job went on without it (it was cut
        off from the store while others resumed the job). The loop stops at
        its next boundary (Job._fenced)."""
        newer = m.maybe(f"g/{n + 1}")
        if newer is None:
            self._newer_since = None
            return
        now = time.monotonic()
        if self._newer_since is None or self._newer_since[0] != n:
            self._newer_since = (n, now)
            return
        if now - self._newer_since[1] >= max(FENCE_MIN_S, self.job.timeout.total_seconds()):
            from .records import Generation
            if self.job.id not in Generation.from_json(newer).members:
                self.job._fenced = True
