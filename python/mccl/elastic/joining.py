"""How a process becomes a member of an elastic job: it joins the running
job, founds it, or resumes it from its checkpoint (decisions.verdict says
which), and is told at once when the job is over or stopped.

A process that wants in registers a join request and waits until a
generation lists it. Founding and resuming publish a generation of their
own: generation 0 (founding) or the one after the store's newest (resuming
a dormant job, or one whose members are all gone), listing the live
requests whose model matches (decisions.founders / resumers); the first
writer wins, and a process the winner did not list asks again.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid

from . import decisions
from .decisions import Verdict
from .events import Change, JobFinished, JobMissing, JobStopped, Refused, _Left
from .records import Cause, Generation, JoinRequest

log = logging.getLogger("mccl.elastic")

_RECONSIDER = object()  # the wait ended without admission: look at the job again


class Joining:
    """Job's part that joins (a mixin: job.py)."""

    def join(self, state=None) -> None:
        """Blocks until this process is a member: of the running job, or of
        the generation that founds or resumes it (the first waits for
        `initial` requests, up to `initial_wait_s`)."""
        t0 = self._join_t0 = time.monotonic()
        if state is not None:
            self._know_state(state)
        said = ""
        no_ckpt_since = None
        while True:
            if self._leave:
                raise _Left()  # its person came back before it was admitted
            o = self._outlook()
            v, why = decisions.verdict(o)
            if v is Verdict.RESUME and self._durable.latest() is None:
                # The record says the job sleeps in its checkpoint folder, but
                # this process sees no valid checkpoint there (a share not
                # mounted, a folder named differently): wait, then say so.
                no_ckpt_since = no_ckpt_since or time.monotonic()
                v, why = Verdict.WAIT, (f"{why}, but {self._durable.where} holds no valid checkpoint of it "
                                        "(is the share mounted, and checkpoint_dir the same on every member?)")
                if time.monotonic() - no_ckpt_since > self.timeout.total_seconds():
                    raise JobMissing(f"mccl.elastic: job {self.members.job!r}: {why}")
            else:
                no_ckpt_since = None
            if v in (Verdict.WAIT, Verdict.MISSING):
                if why != said:
                    log.warning("mccl.elastic: job %r: %s", self.members.job, why)
                    said = why
                if v is Verdict.MISSING and time.monotonic() - t0 > self.timeout.total_seconds():
                    raise JobMissing(f"mccl.elastic: job {self.members.job!r}: {why}")
                time.sleep(0.1)  # a store that came back empty is re-seeded within about 0.3 s
                continue
            if v is Verdict.FINISHED:
                raise JobFinished(f"mccl.elastic: job {self.members.job!r} is over: {why}; start a new job under "
                                  "another name (or `mccl elastic resume` it from its checkpoint)")
            if v is Verdict.STOPPED:
                raise JobStopped(f"mccl.elastic: job {self.members.job!r}: {why}. Fix the cause, then `mccl elastic "
                                 f"resume --job {self.members.job}`", o.latest.error if o.latest else None)
            if v is Verdict.LOST:
                raise JobMissing(f"mccl.elastic: job {self.members.job!r}: {why}")
            got = self._enter(v, o)
            if got is not _RECONSIDER:
                n, rec = got
                break
        self._newcomer = True
        # Rank 0 of a founding generation holds the job's state by definition;
        # rank 0 of a resuming one once it took it from the checkpoint (_take_up).
        self._synced = rec.members[0] == self.id and rec.cause is Cause.START
        self._init_group(n, rec)
        self._note(Change(n, rec.cause.value if rec.cause in (Cause.START, Cause.RESUME) else "join",
                          len(rec.members), joined=[self.id], stall_s=time.monotonic() - t0, step=rec.step))

    # ---- what the store and the disk say ------------------------------------
    def _outlook(self) -> decisions.Outlook:
        m = self.members
        n, latest = m.latest_generation()
        age = m.store_age()
        alive = m.alive_value()
        now = time.monotonic()
        if alive != self._alive_seen:
            self._alive_seen, self._alive_changed = alive, now
        # Silence counts while the store is there to hear the members: after
        # an outage they rewrite their beat within about a second.
        reachable = m.store.reachable_since
        silent = now - max(self._alive_changed, reachable)
        if alive is not None and now - reachable >= 3.0:
            try:  # the beat's own wall time, for a job that died long before this process looked
                silent = max(silent, time.time() - float(alive.decode().split()[1]) - 5.0)
            except (ValueError, IndexError):
                pass
        self._latest_n = n
        if latest is None:
            self._empty_since = self._empty_since or now
        else:
            self._empty_since = None
        silent = silent if latest is not None and latest.live else 0.0
        dead_after = self.timeout.total_seconds()
        # The disk only when it matters (a full verification reads the whole
        # checkpoint; this reads its manifest).
        ref = self._durable.exists() if latest is None or not latest.live or silent >= dead_after else None
        return decisions.Outlook(latest=latest, created=m.created() is not None, may_create=self.create,
                                 checkpoint=ref is not None, store_age_s=age, reseed_s=self.reseed_s,
                                 silent_s=silent, dead_after_s=dead_after,
                                 empty_for_s=now - self._empty_since if self._empty_since else 0.0,
                                 checkpoint_kind=ref.kind if ref is not None else "")

    def _request(self) -> JoinRequest:
        return JoinRequest(id=self.id, host=socket.gethostname(), pid=self._pid, beacon=self._beacon_address,
                           signature=self._sig, create=self.create)

    # ---- entering ------------------------------------------------------------------
    def _enter(self, v: Verdict, o: decisions.Outlook):
        m = self.members
        m.list_job()
        m.put_description(self._sig, self._sig_lines)
        k = m.register(self._request())
        if v is Verdict.JOIN:
            return self._wait_admitted(k)
        # Founding: wait (up to initial_wait_s) for `initial` requests; resuming:
        # at once, with whoever asked (at dusk the others join as they come).
        # Then publish the generation; the first writer wins.
        first = (o.latest.admitted if o.latest is not None else 0) + 1
        end = time.monotonic() + (self.initial_wait_s if v is Verdict.FOUND else 0.0)
        while m.requests() - first + 1 < self.initial and time.monotonic() < end:
            time.sleep(0.01)
        last = m.requests()
        live = m.live_requests(first, last, fresh_s=30.0)
        if v is Verdict.FOUND:
            members, refused, sig = decisions.founders(live, m.why)
            mark = m.created() or m.create(uuid.uuid4().hex[:12])
            rec = Generation(members=tuple(members), admitted=last, cause=Cause.START, step=0,
                             incarnation=mark["incarnation"], signature=sig, refused=refused)
            n = 0
        else:
            held = o.latest
            ref = self._named_checkpoint(held.checkpoint) if held is not None and held.checkpoint else None
            ref = ref or self._durable.latest()
            if ref is None:  # gone since the outlook (pruned, damaged)
                return _RECONSIDER
            sig = (held.signature if held is not None else "") or ref.signature
            members, refused = decisions.resumers(live, sig, m.why)
            if not members and self.id in refused:
                raise Refused(f"mccl.elastic: {self.id} may not resume job {m.job!r}: {refused[self.id]}")
            rec = Generation(members=tuple(members), admitted=last, cause=Cause.RESUME, step=ref.step,
                             incarnation=(held.incarnation if held is not None else "") or ref.incarnation,
                             signature=sig, refused=refused, checkpoint=ref.name)
            n = max(self._latest_n + 1, ref.generation + 1)
            if members:
                log.warning("mccl.elastic: job %r: resuming from checkpoint %s (step %d) with %d member(s)",
                            m.job, ref.name, ref.step, len(members))
        if members:
            m.publish(n, rec)
        return self._wait_admitted(k)

    def _named_checkpoint(self, name: str, wait_s: float = 5.0):
        """The checkpoint a record names, waited for a few seconds (a network
        share's listing may show a new folder late)."""
        end = time.monotonic() + wait_s
        while True:
            ref = self._durable.find(name)
            if ref is not None or time.monotonic() >= end:
                if ref is None:
                    log.warning("mccl.elastic: checkpoint %s, which the job's record names, is not in %s (or "
                                "not valid); taking the newest valid one", name, self._durable.where)
                return ref
            time.sleep(0.5)

    def _wait_admitted(self, k: int, poll_s: float = 0.02, beat_s: float = 0.5):
        """Blocks until a generation lists this process (returns (n, record)),
        refuses it (raises Refused), or the job stopped running, the store
        restarted empty, or its members fell silent for `timeout_s` (returns
        _RECONSIDER: the caller looks at the job again).

        A generation that handled request k (its "admitted" count reached k)
        without listing this process passed it over: the members saw the
        request before it was whole, or its heartbeat late on a loaded
        machine. The waiter then asks again (a new request), so a live
        joiner is never forgotten. The silence counts while the job's
        heartbeat does not move, on this process's clock."""
        m = self.members
        seen = self._latest_n if self._latest_n >= 0 else -1
        wait_s = self.timeout.total_seconds()
        next_beat = time.monotonic() + beat_s
        epoch = m.store.epoch
        while True:
            if self._leave:
                raise _Left()  # its person came back: it stops asking (its heartbeat stops too)
            n = m.latest()
            while n > seen:
                seen += 1
                if seen < 0 or not m.has(f"g/{seen}"):
                    continue
                rec = m.generation(seen)
                if self.id in rec.members:
                    return seen, rec
                if self.id in rec.refused:
                    raise Refused(f"mccl.elastic: {self.id} may not join job {m.job!r}: {rec.refused[self.id]}")
                if not rec.live:
                    return _RECONSIDER
                if rec.admitted >= k:
                    k = m.register(self._request())
            if m.store.epoch != epoch:
                epoch = m.store.epoch
                if m.request(k) is None:  # the store restarted empty: start again
                    return _RECONSIDER
            now = time.monotonic()
            if now >= next_beat:
                # At the heartbeat's pace, not every poll: members rewrite
                # the job's about once a second.
                m.heartbeat(k)
                alive = m.alive_value()
                if alive != self._alive_seen:
                    self._alive_seen, self._alive_changed = alive, now
                if now - max(self._alive_changed, m.store.reachable_since) >= wait_s:
                    return _RECONSIDER
                next_beat = now + beat_s
            time.sleep(poll_s)

    def _take_up(self, state) -> None:
        """Rank 0 of a resuming generation: the job's state from its checkpoint."""
        rec = self.record
        ref = self._named_checkpoint(rec.checkpoint) if rec.checkpoint else None
        if ref is None:
            ref = self._durable.latest()
            if ref is None:
                raise RuntimeError(f"mccl.elastic: job {self.members.job!r}: resuming, but no valid checkpoint is "
                                   f"left in {self._durable.where}")
            log.warning("mccl.elastic: checkpoint %s is not valid; resuming from %s (step %d) instead",
                        rec.checkpoint or "(none named)", ref.name, ref.step)
        t0 = time.monotonic()
        nbytes = self._durable.load(ref, state)
        self._synced = True
        log.warning("mccl.elastic: job %r resumed at step %d from %s (%.1f MB in %.2f s)", self.members.job,
                    state.step, ref.name, nbytes / 1e6, time.monotonic() - t0)

