"""Who is in an elastic job, kept in its store (store.py: a TCPStore that
``mccl elastic serve`` runs, or an etcd cluster). Every key the protocol
uses is named here, under ``mccl-elastic/<job>/``:

    created            the job was created (`mccl elastic create`, or a founder
                       told to): {"incarnation", "time"}
    joinseq            counter of join requests (store.add)
    join/<k>           request k: a records.JoinRequest
    hb/<k>             request k's heartbeat (wall clock, while it waits)
    m/<id>             member <id>'s beacon address and host (beacon.py)
    sig/<signature>    the model/optimizer description behind a signature
    alive              the job's heartbeat: the first three ranks rewrite it
                       about once a second, stuck in a collective or not
    gen                the latest generation number, advanced by compare_set
                       (a reader also looks past it)
    g/<n>              generation n: a records.Generation, written once
                       (the first compare_set wins)
    end                a request to end the job: {"step": S or null}
    pg/<n>/...         the rendezvous of generation n's process group
    rec/<n>/alive      recovery of generation n: ranks that checked in ("3,0,")
    rec/<n>/dead       ranks a survivor saw die (a connection, a beacon)
    rec/<n>/presumed   ranks dead in the generation before
    rec/<n>/decision   the dead set every survivor uses (first compare_set wins)
    rec/<n>/step/<r>   survivor r's step (-1: no state yet); /formed/<r>: its group formed
    rec/<n>/error/<r>  what stopped rank r (train_step raised, ranks disagree)
    history            one JSON line per change (its cause, world, stall, time),
                       appended by one member; for the status page only
    status/job         the job's progress (rank 0, every 2 s); status/m/<id>:
                       each member's (for the status page only)

and, for the store as a whole, ``mccl-store/epoch`` (when the store began to
hold keys: a young store may be one that restarted empty) and
``mccl-fleet/jobs`` (the names of the jobs, for the status page).

A generation's record is written in one compare_set (first writer wins, and
a writer that dies midway leaves nothing half-done), then ``gen`` moves to
it; each decision key is compare_set too, so two survivors can never install
different worlds. Everything in the store that the members also know can be
written again by them (reseed()) after the store restarted empty.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time

from . import decisions
from .records import Generation, JoinRequest, RecordError
from .store import _DEFAULT, ResilientStore

EPOCH_KEY = "mccl-store/epoch"
JOBS_KEY = "mccl-fleet/jobs"


class Membership:
    def __init__(self, store: ResilientStore, job: str):
        if not job or "/" in job or any(c.isspace() for c in job):
            raise ValueError(f"mccl.elastic: job name {job!r} must be non-empty, without '/' or spaces")
        self.store = store
        self.job = job
        self.prefix = f"mccl-elastic/{job}/"

    def key(self, k: str) -> str:
        return self.prefix + k

    # ---- raw helpers -----------------------------------------------------
    def has(self, k: str, patience=_DEFAULT) -> bool:
        return self.store.check([self.key(k)], patience=patience)

    def has_all(self, ks: list[str], patience=_DEFAULT) -> bool:
        return self.store.check([self.key(k) for k in ks], patience=patience)

    def get(self, k: str, patience=_DEFAULT) -> bytes:
        return self.store.get(self.key(k), patience=patience)

    def set(self, k: str, value, patience=_DEFAULT) -> None:
        self.store.set(self.key(k), value, patience=patience)

    def get_json(self, k: str):
        return json.loads(self.get(k).decode())

    def set_json(self, k: str, value) -> None:
        self.set(k, json.dumps(value))

    def maybe(self, k: str, patience=_DEFAULT) -> bytes | None:
        """The value of k, or None when it is not there."""
        return self.get(k, patience) if self.has(k, patience) else None

    # ---- the store's age ---------------------------------------------------
    def store_age(self) -> float:
        """Seconds since the store began to hold keys (0 if this call is the
        first to ask: a store that restarted empty looks like that)."""
        mine = repr(time.time())
        got = self.store.compare_set(EPOCH_KEY, "", mine).decode()
        try:
            return max(0.0, time.time() - float(got.split()[0]))
        except (ValueError, IndexError):
            return 0.0

    def list_job(self) -> None:
        """Names this job in the fleet's index (once per store incarnation)."""
        cur = self.store.get(JOBS_KEY).decode() if self.store.check([JOBS_KEY]) else ""
        if self.job not in cur.split("\n"):
            self.store.append(JOBS_KEY, self.job + "\n")

    # ---- creating --------------------------------------------------------
    def created(self) -> dict | None:
        raw = self.maybe("created")
        return json.loads(raw.decode()) if raw else None

    def create(self, incarnation: str) -> dict:
        """Marks the job created (first writer wins); returns the mark."""
        mark = json.dumps({"incarnation": incarnation, "time": time.time()})
        return json.loads(self.store.compare_set(self.key("created"), "", mark).decode())

    # ---- joining ---------------------------------------------------------
    def register(self, req: JoinRequest) -> int:
        """A join request; returns its number."""
        k = self.store.add(self.key("joinseq"), 1)
        self.set(f"join/{k}", req.to_json())
        self.heartbeat(k)
        self.set_member(req.id, req.beacon, req.host)
        return k

    def raise_counter(self, k: str, at_least: int) -> None:
        """Counter k (store.add's) to at least `at_least`, atomically: every
        member may do it at once without overshooting."""
        key = self.key(k)
        for _ in range(100):
            cur = self.store.add(key, 0)
            if cur >= at_least:
                return
            self.store.compare_set(key, str(cur), str(at_least))
        raise RuntimeError(f"mccl.elastic: could not raise {key} to {at_least}")

    def heartbeat(self, k: int) -> None:
        self.set(f"hb/{k}", repr(time.time()))

    def requests(self, patience=_DEFAULT) -> int:
        return self.store.add(self.key("joinseq"), 0, patience=patience)

    def request(self, k: int) -> JoinRequest | None:
        raw = self.maybe(f"join/{k}")
        if raw is None:
            return None
        try:
            return JoinRequest.from_json(raw, f"join request {k} of job {self.job!r}")
        except RecordError:
            return None  # half-written or foreign: not a live request

    def set_member(self, member_id: str, beacon: str, host: str) -> None:
        self.set(f"m/{member_id}", json.dumps({"beacon": beacon, "host": host}))

    def beacon_of(self, member_id: str) -> str:
        raw = self.maybe(f"m/{member_id}")
        try:
            return str(json.loads(raw.decode()).get("beacon", "")) if raw else ""
        except ValueError:
            return ""

    def job_beat(self) -> None:
        """Says that a member of the job is alive (see the joiner's wait)."""
        self.set("alive", f"{os.getpid()} {time.time()!r}")

    def alive_value(self) -> bytes | None:
        return self.maybe("alive")

    def live_requests(self, first: int, last: int, fresh_s: float,
                      beats: "BeatWatch | None" = None) -> list[JoinRequest]:
        """Requests first..last whose waiter still beats (others died waiting).
        With `beats` (a watch of this process's own), a heartbeat seen to
        change within `fresh_s` on this process's clock is live and one seen
        unchanged for longer is not, whatever the clocks of the two machines
        say; a request the watch has not seen change yet is judged by the
        heartbeat's wall-clock time."""
        out = []
        now = time.time()
        for k in range(first, last + 1):
            req = self.request(k)
            raw = self.maybe(f"hb/{k}")
            if req is None or raw is None:
                continue
            try:
                beat = float(raw.decode())
            except ValueError:
                continue
            verdict = beats.fresh(k, raw, fresh_s) if beats is not None else None
            if verdict if verdict is not None else now - beat <= fresh_s:
                out.append(req)
        return unique(out)

    # ---- signatures --------------------------------------------------------
    def put_description(self, sig: str, lines: list[str]) -> None:
        if sig:
            self.store.compare_set(self.key(f"sig/{sig}"), "", json.dumps(lines))

    def description(self, sig: str) -> list[str]:
        raw = self.maybe(f"sig/{sig}") if sig else None
        return json.loads(raw.decode()) if raw else []

    def why(self, sig: str, job_sig: str) -> str:
        from .signature import first_difference
        mine, job = self.description(sig), self.description(job_sig)
        if not mine or not job:
            return f"signature {sig} against the job's {job_sig}"
        return first_difference(mine, job)

    # ---- generations -----------------------------------------------------
    def latest(self) -> int:
        """The newest generation, or -1 before the first."""
        raw = self.maybe("gen")
        n = int(raw.decode()) if raw else -1
        # A writer that died after writing g/<n> but before moving gen
        # leaves gen behind: the records themselves are the truth.
        while self.has(f"g/{n + 1}"):
            n += 1
        return n

    def generation(self, n: int) -> Generation:
        return Generation.from_json(self.get(f"g/{n}"), f"generation {n} of job {self.job!r}")

    def latest_generation(self) -> tuple[int, Generation | None]:
        n = self.latest()
        return n, (self.generation(n) if n >= 0 else None)

    def recent(self, n: int, count: int) -> list[Generation]:
        """Generations n - count + 1 .. n that the store still holds, oldest first."""
        out = []
        for m in range(max(0, n - count + 1), n + 1):
            if self.has(f"g/{m}"):
                out.append(self.generation(m))
        return out

    def publish(self, n: int, record: Generation) -> Generation:
        """Writes generation n's record unless one was written first, then
        moves ``gen`` to it. Returns generation n as the store holds it:
        `record` (written here, or the same record written by another member
        that computed it too), or another one that came first (the caller
        follows it): a record, once written, never changes."""
        text = record.to_json()
        got = self.store.compare_set(self.key(f"g/{n}"), "", text).decode()
        held = record if got == text else Generation.from_json(got, f"generation {n} of job {self.job!r}")
        self._move_gen(n)
        return held

    def _move_gen(self, n: int) -> None:
        for _ in range(8):  # gen only moves forward; others may move it too
            cur = self.maybe("gen")
            cur_s = cur.decode() if cur else ""
            if cur_s and int(cur_s) >= n:
                break
            self.store.compare_set(self.key("gen"), cur_s, str(n))

    # ---- after a restart of the store --------------------------------------
    def reseed(self, n: int, rec: Generation, member_id: str, beacon: str, sig_lines: list[str]) -> bool:
        """Writes back what the members know and a store that restarted empty
        lost: generation n's record, ``gen``, the request counter (at least
        the requests handled), the job's creation mark, this member's beacon
        and the model's description. Idempotent; every member may run it.
        Returns whether generation n's record was missing."""
        missing = not self.has(f"g/{n}")
        # The request counter first: a joiner that registers once the record
        # is back must get a number past the requests already handled.
        self.raise_counter("joinseq", rec.admitted)
        if missing:
            held = self.publish(n, rec)
            if held != rec:
                import logging
                logging.getLogger("mccl.elastic").error(
                    "mccl.elastic: re-seeding the store: generation %d of job %r is another record (%s), "
                    "written by a process that did not wait for the members to re-seed it", n, self.job,
                    held.to_json()[:200])
        else:
            self._move_gen(n)
        if rec.incarnation:
            self.store.compare_set(self.key("created"), "", json.dumps({"incarnation": rec.incarnation,
                                                                         "time": time.time()}))
        self.set_member(member_id, beacon, socket.gethostname())
        self.put_description(rec.signature, sig_lines)
        self.list_job()
        return missing

    # ---- ending ------------------------------------------------------------
    def request_end(self, step: int | None) -> None:
        self.set_json("end", {"step": step})

    def end_request(self) -> int | None:
        """The step at which the job was asked to end (-1: at once), or None."""
        raw = self.maybe("end")
        if raw is None:
            return None
        try:
            step = json.loads(raw.decode()).get("step")
        except (ValueError, AttributeError):
            return None
        return -1 if step is None else int(step)

    # ---- recovery after a failure ---------------------------------------
    def check_in(self, n: int, rank: int, dead: list[int]) -> None:
        self.store.append(self.key(f"rec/{n}/alive"), f"{rank},")
        if dead:
            self.note_dead(n, dead)

    def note_dead(self, n: int, dead: list[int]) -> None:
        self.store.append(self.key(f"rec/{n}/dead"), "".join(f"{d}," for d in dead))

    def ranks(self, k: str) -> set[int]:
        raw = self.maybe(k)
        return {int(x) for x in raw.decode().split(",") if x} if raw else set()

    def decide(self, n: int, world: int, grace_s: float, poll_s: float = 0.02, holder_s: float = 0.0,
               presumed_s: float | None = None, is_dead=None, is_alive=None, alive_grace_s: float = 0.0,
               recheck=None) -> dict:
        """The dead set of generation n's failure, the same for every survivor
        (decisions.dead_set says when it can be decided). `is_dead(rank)`
        tells whether a rank that has not checked in is proven gone (its
        beacon), `is_alive(rank)` whether its process is proven there (then
        it is waited for up to `alive_grace_s`); `recheck()` runs again this
        survivor's check-in after the store came back (it may have lost it)."""
        start = time.monotonic()
        key = f"rec/{n}/decision"
        epoch = self.store.epoch
        while True:
            raw = self.maybe(key)
            if raw is not None:
                return json.loads(raw.decode())
            if self.store.epoch != epoch:
                # The store was away (and may have restarted empty): check in
                # again, and give the others their grace from its return.
                epoch = self.store.epoch
                if recheck is not None:
                    recheck()
            start = max(start, self.store.reachable_since)
            alive = self.ranks(f"rec/{n}/alive")
            seen = self.ranks(f"rec/{n}/dead")
            if is_dead is not None:
                proven = [r for r in range(world) if r not in alive and r not in seen and is_dead(r)]
                if proven:
                    self.note_dead(n, proven)
                    seen |= set(proven)
            # A rank proven alive is worth waiting for only while nobody has
            # moved past generation n: once generation n + 1 is written, the
            # ones that have not checked in are in it (or left) and will
            # not come here.
            waitable = is_alive is not None and not self.has(f"g/{n + 1}")
            there = frozenset(r for r in range(world) if waitable and r not in alive and r not in seen
                              and is_alive(r))
            elapsed = time.monotonic() - start
            acct = decisions.Accounting(world=world, alive=frozenset(alive), seen_dead=frozenset(seen),
                                        presumed=frozenset(self.ranks(f"rec/{n}/presumed")), elapsed_s=elapsed,
                                        grace_s=grace_s, presumed_s=presumed_s, holder_s=holder_s,
                                        beacon_alive=there, alive_grace_s=alive_grace_s)
            if decisions.dead_set(acct) is not None:
                # Decidable as far as the dead go: now whether a rank that holds the state is in.
                steps = {}
                for r in alive:
                    s = self.maybe(f"rec/{n}/step/{r}")
                    if s is not None:
                        steps[str(r)] = int(s.decode())
                holders = not holder_s or any(s >= 0 for s in steps.values())
                dead = decisions.dead_set(dataclasses.replace(acct, holders=holders))
                if dead is not None:
                    mine = {"dead": dead, "alive": sorted(alive), "steps": steps, "waited_s": round(elapsed, 3)}
                    got = self.store.compare_set(self.key(key), "", json.dumps(mine)).decode()
                    return json.loads(got)
            time.sleep(poll_s)


def unique(requests: list[JoinRequest]) -> list[JoinRequest]:
    """One request per process (its newest): a process that asked again
    (passed over, or looking at the job anew) has several."""
    newest = {r.id: r for r in requests}
    return [r for r in requests if newest[r.id] is r]


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
            raw = m.maybe(f"hb/{k}")
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

    def forget(self) -> None:
        """After the store restarted: request numbers start again."""
        with self._lock:
            self._seen.clear()


class KeySetter:
    """Sets keys of a job's store from a helper process started once under
    `prefix` (e.g. ``ip netns exec`` into the store's network namespace, for
    a driver that cannot reach it directly); a set then takes milliseconds,
    not a Python start-up. Used by tests and benchmarks that steer a job.
    ``end(step)`` asks the job to end at that step (as `mccl elastic end`);
    ``latest()`` reads its newest generation record."""

    _CODE = ("import datetime, sys\n"
             "from mccl.elastic.membership import Membership\n"
             "from mccl.elastic.store import connect\n"
             "m = Membership(connect(sys.argv[1], datetime.timedelta(seconds=30)), sys.argv[2])\n"
             "m.store.raw()\n"
             "print('ready', flush=True)\n"
             "for line in sys.stdin:\n"
             "    k, v = line.split()\n"
             "    if k == 'END':\n"
             "        m.request_end(None if v == '-' else int(v))\n"
             "    elif k == 'LATEST':\n"
             "        g = m.latest_generation()[1]\n"
             "        print('ok', g.to_json() if g is not None else '-', flush=True)\n"
             "        continue\n"
             "    elif k == 'REQUESTS':\n"
             "        print('ok', m.requests(), flush=True)\n"
             "        continue\n"
             "    else:\n"
             "        m.set(k, v)\n"
             "    print('ok', flush=True)\n")

    def __init__(self, store: str, job: str, prefix: list[str] | None = None):
        import subprocess
        import sys
        self.proc = subprocess.Popen(list(prefix or []) + [sys.executable, "-c", self._CODE, store, job],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = ""
        for _ in range(50):  # torch may warn before the helper is ready
            line = self.proc.stdout.readline()
            if not line or "ready" in line:
                break
        if "ready" not in line:
            self.proc.kill()
            raise RuntimeError(f"mccl.elastic: cannot reach the store at {store}")

    def _send(self, key: str, value: str) -> str:
        self.proc.stdin.write(f"{key} {value}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer.split(" ", 1)[0] != "ok":
            raise RuntimeError(f"mccl.elastic: {key} through the store failed")
        return answer[3:]

    def set(self, key: str, value: str) -> None:
        self._send(key, value)

    def end(self, step: int | None) -> None:
        self._send("END", "-" if step is None else str(step))

    def latest(self) -> Generation | None:
        """The job's newest generation record."""
        text = self._send("LATEST", "-")
        return None if text == "-" else Generation.from_json(text)

    def requests(self) -> int:
        """Join requests made so far."""
        return int(self._send("REQUESTS", "-"))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
