"""Who is in an elastic job, kept in the c10d store (a TCPStore on the one
machine that stays on; ``mccl elastic serve`` starts one).

Every key lives under ``mccl-elastic/<job>/``:

    joinseq            counter of join requests (store.add)
    join/<k>           request k: {"id", "host", "pid"}
    hb/<k>             request k's heartbeat (wall clock, while it waits)
    alive              the job's heartbeat: the first three ranks rewrite it
                       about once a second, stuck in a collective or not (a
                       joiner keeps waiting while it moves)
    gen                the latest generation number, advanced by compare_set
                       (a reader also looks past it: a writer may die
                       between writing g/<n> and moving it)
    g/<n>              generation n, written once (the first compare_set
                       wins): {"members": [ids in rank order],
                       "admitted": join requests handled so far, "cause", ...};
                       no members and cause "end": every member left, the job is over
    pg/<n>/...         the rendezvous of generation n's process group
    rec/<n>/alive      recovery of generation n: ranks that checked in ("3,0,")
    rec/<n>/dead       ranks a survivor saw die (its connection failed)
    rec/<n>/decision   the dead set every survivor uses (first compare_set wins)
    rec/<n>/step/<r>   survivor r's step (-1: it holds no state yet), /formed/<r>: its group formed

A generation's record is written in one compare_set (first writer wins, and
a writer that dies midway leaves nothing half-done), then ``gen`` moves to
it; each decision key is compare_set too, so two survivors can never install
different worlds.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from datetime import timedelta

import torch.distributed as dist


class Membership:
    def __init__(self, store: dist.Store, job: str):
        if not job or "/" in job:
            raise ValueError(f"mccl.elastic: job name {job!r} must be non-empty without '/'")
        self.base = store
        self.store = dist.PrefixStore(f"mccl-elastic/{job}/", store)
        self.job = job

    # ---- raw helpers -----------------------------------------------------
    def has(self, key: str) -> bool:
        return self.store.check([key])

    def get_json(self, key: str):
        return json.loads(self.store.get(key).decode())

    def set_json(self, key: str, value) -> None:
        self.store.set(key, json.dumps(value))

    # ---- joining ---------------------------------------------------------
    def register(self, member_id: str) -> int:
        """A join request; returns its number (1 for the job's first)."""
        k = self.store.add("joinseq", 1)
        self.set_json(f"join/{k}", {"id": member_id, "host": socket.gethostname(), "pid": os.getpid()})
        self.heartbeat(k)
        return k

    def heartbeat(self, k: int) -> None:
        self.store.set(f"hb/{k}", repr(time.time()))

    def requests(self) -> int:
        return self.store.add("joinseq", 0)

    def job_beat(self) -> None:
        """Says that a member of the job is alive (see wait_admitted)."""
        self.store.set("alive", f"{os.getpid()} {time.time()!r}")

    def live_requests(self, first: int, last: int, fresh_s: float,
                      beats: "BeatWatch | None" = None) -> list[tuple[int, str]]:
        """Requests first..last whose waiter still beats (others died waiting).
        With `beats` (a watch of this process's own), a heartbeat seen to
        change within `fresh_s` on this process's clock is live and one seen
        unchanged for longer is not, whatever the clocks of the two machines
        say; a request the watch has not seen change yet is judged by the
        heartbeat's wall-clock time."""
        out = []
        now = time.time()
        for k in range(first, last + 1):
            try:
                req = self.get_json(f"join/{k}")
                raw = self.store.get(f"hb/{k}")
                beat = float(raw.decode())
            except Exception:  # noqa: BLE001 - a half-written request is not live
                continue
            verdict = beats.fresh(k, raw, fresh_s) if beats is not None else None
            if verdict if verdict is not None else now - beat <= fresh_s:
                out.append((k, req["id"]))
        return out

    # ---- generations -----------------------------------------------------
    def latest(self) -> int:
        """The newest generation, or -1 before the first."""
        n = int(self.store.get("gen").decode()) if self.has("gen") else -1
        # A writer that died after writing g/<n> but before moving gen
        # leaves gen behind: the records themselves are the truth.
        while self.has(f"g/{n + 1}"):
            n += 1
        return n

    def generation(self, n: int) -> dict:
        return self.get_json(f"g/{n}")

    def publish(self, n: int, record: dict) -> bool:
        """Writes generation n's record unless one was written first, then
        moves ``gen`` to it. True when generation n is `record` (written
        here, or the same record written by another member that computed it
        too); False when another record came first (the caller reads and
        follows it): a record, once written, never changes."""
        text = json.dumps(record)
        if self.store.compare_set(f"g/{n}", "", text).decode() != text:
            return False
        for _ in range(8):  # gen only moves forward; others may move it too
            cur = self.store.get("gen").decode() if self.has("gen") else ""
            if cur and int(cur) >= n:
                break
            self.store.compare_set("gen", cur, str(n))
        return True

    def wait_admitted(self, member_id: str, k: int, timeout: timedelta,
                      poll_s: float = 0.02, beat_s: float = 0.5) -> tuple[int, dict]:
        """Blocks until a generation lists `member_id` (beating for request k).

        A generation that handled request k (its "admitted" count reached k)
        without listing this member passed it over: the members saw the
        request before it was whole, or its heartbeat late on a loaded
        machine. The waiter then asks again (a new request), so a live
        joiner is never forgotten.

        `timeout` counts while no member is seen alive: each change of the
        job's heartbeat (job_beat) starts it again, so a joiner outwaits
        members that are recovering from a failure (which can take their
        own timeout) and gives up on a job whose members are all gone.
        Changes are timed on this process's clock, whatever the members'
        clocks say."""
        wait_s = timeout.total_seconds()
        end = time.monotonic() + wait_s
        seen = -1
        next_beat = time.monotonic() + beat_s
        last_alive = None
        while time.monotonic() < end:
            n = self.latest()
            while n > seen:
                seen += 1
                if seen < 0 or not self.has(f"g/{seen}"):
                    continue
                rec = self.generation(seen)
                if member_id in rec["members"]:
                    return seen, rec
                if rec.get("cause") == "end":
                    raise RuntimeError(f"mccl.elastic: job {self.job!r} ended at step {rec.get('step')} (its last "
                                       f"members left together); start a new job under another name")
                if int(rec.get("admitted", 0)) >= k:
                    k = self.register(member_id)
            if time.monotonic() >= next_beat:
                # At the heartbeat's pace, not every poll: members rewrite
                # the job's about once a second.
                self.heartbeat(k)
                alive = self.store.get("alive") if self.has("alive") else None
                if alive is not None and alive != last_alive:
                    last_alive = alive
                    end = max(end, time.monotonic() + wait_s)
                next_beat = time.monotonic() + beat_s
            time.sleep(poll_s)
        raise TimeoutError(f"mccl.elastic: not admitted to job {self.job!r}: no member of it was seen "
                           f"alive for {wait_s:.0f} s (is a member running, or the first one?)")

    # ---- recovery after a failure ---------------------------------------
    def check_in(self, n: int, rank: int, dead: list[int]) -> None:
        self.store.append(f"rec/{n}/alive", f"{rank},")
        if dead:
            self.store.append(f"rec/{n}/dead", "".join(f"{d}," for d in dead))

    def _ranks(self, key: str) -> set[int]:
        if not self.has(key):
            return set()
        return {int(x) for x in self.store.get(key).decode().split(",") if x}

    def decide(self, n: int, world: int, steps_key: str, grace_s: float, poll_s: float = 0.005,
               holder_s: float = 0.0, presumed_s: float | None = None) -> dict:
        """The dead set of generation n's failure, the same for every survivor:
        ranks that did not check in once every rank is accounted for (checked
        in, or seen dead by a survivor), or when `grace_s` has passed. Ranks
        listed in rec/<n>/presumed (dead in the generation before) count as
        accounted for once `presumed_s` has passed. With `holder_s`, no
        decision is written before a rank whose step is >= 0 (one that holds
        the job's state) has checked in, for up to that long."""
        start = time.monotonic()
        end = start + grace_s
        key = f"rec/{n}/decision"
        while True:
            if self.has(key):
                return self.get_json(key)
            alive = self._ranks(f"rec/{n}/alive")
            dead = self._ranks(f"rec/{n}/dead") - alive
            if presumed_s is not None and time.monotonic() >= start + presumed_s:
                dead |= self._ranks(f"rec/{n}/presumed") - alive
            if len(alive) + len(dead) >= world or time.monotonic() >= end:
                steps = {}
                for r in alive:
                    if self.has(f"{steps_key}/{r}"):
                        steps[str(r)] = int(self.store.get(f"{steps_key}/{r}").decode())
                if holder_s and not any(s >= 0 for s in steps.values()) and \
                        time.monotonic() < start + holder_s:
                    time.sleep(poll_s)
                    continue
                mine = {"dead": sorted(set(range(world)) - alive), "alive": sorted(alive), "steps": steps,
                        "waited_s": round(grace_s - max(0.0, end - time.monotonic()), 3)}
                got = self.store.compare_set(key, "", json.dumps(mine)).decode()
                return json.loads(got)
            time.sleep(poll_s)


class BeatWatch:
    """When this process last saw each join request's heartbeat change, on
    its own monotonic clock: liveness that needs no clock synchronisation
    between the joiner's machine and this one. Rank 0's store watcher
    observes the waiting requests every 0.2 s (observe()); the member that
    decides on joiners asks it (Membership.live_requests)."""

    def __init__(self):
        self._seen: dict[int, tuple[bytes, float, float | None]] = {}  # value, first seen, changed
        self._lock = threading.Lock()

    def observe(self, m: "Membership", first: int, last: int) -> None:
        now = time.monotonic()
        for k in range(first, last + 1):
            try:
                raw = m.store.get(f"hb/{k}") if m.has(f"hb/{k}") else None
            except Exception:  # noqa: BLE001 - the store is away: look next time
                return
            if raw is not None:
                self.note(k, raw, now)

    def note(self, k: int, raw: bytes, now: float) -> None:
        with self._lock:
            prev = self._seen.get(k)
            if prev is None:
                self._seen[k] = (raw, now, None)  # first sight: no change seen yet
            elif prev[0] != raw:
                self._seen[k] = (raw, prev[1], now)

    def fresh(self, k: int, raw: bytes, fresh_s: float, now: float | None = None) -> bool | None:
        """True when request k's heartbeat changed within `fresh_s`, False
        when it has not (or, seen for longer than that, never changed), None
        when this watch cannot tell yet."""
        now = time.monotonic() if now is None else now
        self.note(k, raw, now)
        with self._lock:
            _, first, changed = self._seen[k]
        if changed is not None:
            return now - changed <= fresh_s
        return False if now - first > fresh_s else None


class KeySetter:
    """Sets keys of a job's store from a helper process started once under
    `prefix` (e.g. ``ip netns exec`` into the store's network namespace, for
    a driver that cannot reach it directly); a set then takes milliseconds,
    not a Python start-up. Used by tests and benchmarks that steer a job."""

    _CODE = ("import datetime, sys, torch.distributed as d\n"
             "from mccl.elastic.membership import Membership\n"
             "s = d.TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, timeout=datetime.timedelta(seconds=30))\n"
             "m = Membership(s, sys.argv[3])\n"
             "print('ready', flush=True)\n"
             "for line in sys.stdin:\n"
             "    k, v = line.split()\n"
             "    m.store.set(k, v)\n"
             "    print('ok', flush=True)\n")

    def __init__(self, host: str, port: int, job: str, prefix: list[str] | None = None):
        import subprocess
        import sys
        self.proc = subprocess.Popen(list(prefix or []) + [sys.executable, "-c", self._CODE, host, str(port), job],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(50):  # torch may warn before the helper is ready
            line = self.proc.stdout.readline()
            if not line or "ready" in line:
                break
        if "ready" not in line:
            self.proc.kill()
            raise RuntimeError(f"mccl.elastic: cannot reach the store at {host}:{port}")

    def set(self, key: str, value: str) -> None:
        self.proc.stdin.write(f"{key} {value}\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "ok":
            raise RuntimeError(f"mccl.elastic: setting {key} in the store failed")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
