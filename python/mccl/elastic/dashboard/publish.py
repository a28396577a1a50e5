"""What members and agents write for the status page, and how they write it
without ever waiting for the store.

Members: Job._publish_status (from the member's store-watching thread, never
the training loop) writes member_status() every STATUS_EVERY_S and, from rank
0, job_status(); a slow store stretches the interval (a write that took t
seconds waits SLOW_FACTOR * t before the next), an away one skips it.

Agents: AgentPublisher.offer() is called from the agent's loop and returns at
once; its own thread writes the latest state on each change and every
`every_s` otherwise. A write that cannot reach the store fails at once
(patience 0: StoreAway) and is dropped; the store module logs one line per
outage.
"""

from __future__ import annotations

import atexit
import datetime
import itertools
import logging
import os
import socket
import threading
import time

from . import keys

log = logging.getLogger("mccl.elastic")

STATUS_EVERY_S = 2.0   # a member's status, at most this often
SLOW_FACTOR = 50.0     # a write that took t s: the next one waits at least SLOW_FACTOR * t


def _mean(xs) -> float | None:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


_HOST = socket.gethostname()[:keys.NAME_MAX]


class WireRate:
    """Bytes per second this process's MCCL sockets sent and received
    between two calls (mccl._C._wire_bytes: every group of the process, so
    every group of the one member it runs)."""

    def __init__(self, read=None):
        self._read = read
        self._last: tuple[float, int, int] | None = None

    def __call__(self, now: float | None = None) -> tuple[float | None, float | None]:
        if self._read is None:
            from mccl import _C
            self._read = _C._wire_bytes
        now = time.monotonic() if now is None else now
        sent, received = self._read()
        last, self._last = self._last, (now, sent, received)
        if last is None or now <= last[0]:
            return None, None
        dt = now - last[0]
        return (sent - last[1]) / dt, (received - last[2]) / dt


def member_status(job, rank: int, host: str = _HOST) -> dict:
    """This member's status value (status/m/<id>): about 300 bytes."""
    times = list(job._step_times)
    busy = sum(t for t, _ in times)
    # Job(shares="speed"): this member's samples in the last step, and why it
    # is (or is about to be asked to leave as) a straggler; None otherwise.
    bal = getattr(job, "_balance", None)
    share, straggler = bal.status() if bal is not None else (None, None)
    rate = getattr(job, "_wire_rate", None)
    if rate is None:
        rate = job._wire_rate = WireRate()
    sent_Bps, received_Bps = rate()
    return {"id": job.id[:keys.NAME_MAX], "host": host, "rank": rank,
            "pid": getattr(job, "_pid", None) or os.getpid(), "generation": job.generation, "step": live_step(job),
            "step_s": _r(busy / len(times)) if times else None,
            "samples_per_s": _r(sum(s for _, s in times) / busy, 2) if busy else None,
            "boundary_s": _r(_mean(itertools.islice(reversed(job.boundary_s), 20)), 5),
            "skipped": len(job.skipped), "share": share,
            "wire_sent_Bps": None if sent_Bps is None else round(sent_Bps),
            "wire_received_Bps": None if received_Bps is None else round(received_Bps),
            "straggler": straggler[:keys.TEXT_MAX] if straggler else None, "time": round(time.time(), 3)}


def job_status(job, mine: dict) -> dict:
    """The job's status value (status/job), from rank 0's view."""
    rec = job.record
    world = len(rec.members)
    steps = getattr(job, "steps", None)  # the run's last step, where the loop exposes it
    return {"generation": job.generation, "cause": rec.cause.value, "world": world, "step": mine["step"],
            "steps": steps if isinstance(steps, int) else None, "end_at": job._end_at,
            "step_s": mine["step_s"], "loss": _r(job._last_loss, 6),
            "samples_per_s": _r(mine["samples_per_s"] * world, 2) if mine["samples_per_s"] else None,
            "time": mine["time"]}


def live_step(job) -> int:
    """The job's committed steps as this member last saw them (Job.step), or
    the generation's first step before it committed one."""
    rec = job.record
    base = rec.step if rec is not None else 0
    return max(base, int(getattr(job, "step", 0)))


class AgentPublisher:
    """Writes an agent's state to mccl-fleet/agent/<host> from its own thread
    (module doc). `store` is an address as Job takes it."""

    def __init__(self, store: str, host: str = "", job: str = "", every_s: float = 5.0, connect_s: float = 5.0):
        self.address, self.every_s, self.connect_s = store, every_s, connect_s
        self.host = (host or socket.gethostname())[:keys.NAME_MAX]
        if not keys.good_name(self.host):
            raise ValueError(f"mccl agent: [fleet] host {self.host!r} must be a name without '/' or spaces")
        self.job = job
        self._store = None
        self._listed_epoch = -1
        self._cond = threading.Condition()
        self._value: dict | None = None
        self._dirty = False
        self._closing = False
        self.written = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._loop, name="mccl-agent-publish", daemon=True)
        self._thread.start()
        # A daemon thread that Python's exit finds inside a store call is
        # ended by a forced unwind through torch's C++ frames, which aborts
        # the process: at exit, wait for the call in flight (bounded by connect_s).
        atexit.register(self.close, connect_s + 1.0)

    def offer(self, state: str, reason: str, pid: int | None) -> None:
        """The agent's state now; returns at once. A change of state or
        worker is written at once, the rest at most every `every_s`."""
        now = time.time()
        with self._cond:
            prev = self._value
            # A new state or worker is written at once; a reason that only
            # moves on (idle 20.1 min, 20.2 min...) with the periodic write.
            changed = prev is None or prev["state"] != state or prev["pid"] != pid
            since = now if prev is None or prev["state"] != state else prev["since"]
            self._value = {"host": self.host, "state": state, "reason": reason[:keys.TEXT_MAX],
                           "since": round(since, 3), "job": self.job[:keys.NAME_MAX], "pid": pid,
                           "time": round(now, 3)}
            if changed:
                self._dirty = True
                self._cond.notify()

    def close(self, wait_s: float = 0.5) -> None:
        """Writes the last state offered (waiting at most `wait_s`), then stops."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=wait_s)
        if not self._thread.is_alive():
            atexit.unregister(self.close)

    def _loop(self) -> None:
        last = 0.0
        while True:
            with self._cond:
                if not self._dirty and not self._closing:
                    self._cond.wait(timeout=max(0.0, last + self.every_s - time.monotonic()))
                closing = self._closing
                value = dict(self._value) if self._value is not None else None
                due = self._dirty or time.monotonic() - last >= self.every_s
                self._dirty = False
            if value is not None and (due or closing):
                value["time"] = round(time.time(), 3)
                self._write(value)
                last = time.monotonic()
            if closing:
                return
            time.sleep(0.2)  # at most 5 writes a second, whatever flaps

    def _write(self, value: dict) -> None:
        from ..store import connect
        try:
            if self._store is None:
                self._store = connect(self.address, datetime.timedelta(seconds=self.connect_s))
                self._store.patience = 0.0
            s = self._store
            s.set(keys.agent_key(self.host), keys.dumps(value))
            if s.epoch != self._listed_epoch:  # a new connection: the store may have restarted empty
                cur = s.get(keys.AGENTS_KEY).decode() if s.check([keys.AGENTS_KEY]) else ""
                if self.host not in cur.split("\n"):
                    s.append(keys.AGENTS_KEY, self.host + "\n")
                self._listed_epoch = s.epoch
            self.written += 1
        except Exception as e:  # noqa: BLE001 - the status is never worth failing the agent for
            self.dropped += 1
            log.debug("mccl agent: status not written (%s)", e)
