"""The fleet as one dict, read from the store: what /api/fleet serves, the
page shows and /metrics exports.

    fleet = Fleet(StoreReader.tcp("127.0.0.1", 29400))
    snap = fleet.read()    # {"jobs": [...], "agents": [...], "counts": {...}, "store": {...}}

A read costs a handful of round trips (reader.py): the indices, the jobs'
own keys, a generation record only when it is new, the history only when a
change is due in it, then every member's and agent's status at once.

Only known fields of known types are taken from what members and agents
wrote (keys.py), so a value that carries anything else (or a key outside
the status keys, such as a process group's bootstrap record) never reaches
a page. Fleet also keeps what one read cannot tell: when the coordinator
first saw each generation (records carry no time), when a job's step last
moved, and each job's night of samples (series.py).
"""

from __future__ import annotations

import json
import statistics
import time

from .. import decisions
from ..membership import JOBS_KEY
from ..records import Cause, Generation, RecordError
from . import keys
from .reader import StoreReader
from .series import Series

MAX_JOBS = 64
MAX_AGENTS = 4096
MAX_CHANGES = 200     # of a job's timeline on the page
RECORDS_BACK = 50     # generation records read back when a job has no history key
IDS_SHOWN = 12        # member ids named per change (the counts are whole)
STALE_MEMBER_S = 10.0


def state_of(rec: Generation | None) -> str:
    if rec is None:
        return "not started"
    return {Cause.DORMANT: "dormant", Cause.END: "finished", Cause.STOPPED: "stopped"}.get(rec.cause, "running")


def _ids(xs: list[str]) -> list[str]:
    return [keys.text(x, keys.NAME_MAX) for x in xs[:IDS_SHOWN]]


def _change(d: dict) -> dict | None:
    """A history line (or a change made from records) with known fields only."""
    n = keys.integer(d.get("generation"), 0)
    cause = d.get("cause")
    if n is None or cause not in {c.value for c in Cause}:
        return None
    joined = [x for x in d.get("joined", []) if isinstance(x, str)] if isinstance(d.get("joined"), list) else []
    left = [x for x in d.get("left", []) if isinstance(x, str)] if isinstance(d.get("left"), list) else []
    world = keys.integer(d.get("world"), 0)
    # History lines name at most 50 ids; founders are the whole world.
    joined_n = max(len(joined), world or 0) if cause in ("start", "resume") else len(joined)
    return {"generation": n, "cause": cause, "world": world,
            "joined": _ids(joined), "joined_n": joined_n, "left": _ids(left), "left_n": len(left),
            "stall_s": keys.num(d.get("stall_s"), 0), "bytes": keys.integer(d.get("bytes"), 0),
            "step": keys.integer(d.get("step"), 0),
            "time": keys.num(d.get("time"), 0), "seen": bool(d.get("seen"))}


class _Track:
    """What the coordinator remembers of one job between reads."""

    def __init__(self, every_s: float, keep_s: float):
        self.created: str | None = None  # the job's incarnation
        self.records: dict[int, Generation] = {}
        self.from_records: dict[int, dict] = {}   # generation -> change, made from records
        self.seen: dict[int, float] = {}           # generation -> when first seen here
        self.history: list[dict] = []
        self.history_at = -1e18
        self.history_n = -1
        self.step: int | None = None
        self.step_at = 0.0
        self.watched = False  # read once already: records found later are new
        self.series = Series(every_s, keep_s)

    def forget(self) -> None:
        """Everything but the night's samples (the job's name goes on)."""
        series = self.series
        self.__init__(series.every_s, series.every_s * series.ring.maxlen)
        self.series = series


class Fleet:
    def __init__(self, reader: StoreReader, every_s: float = 10.0, keep_s: float = 86400.0,
                 stale_agent_s: float = 20.0, clock=time.time):
        self.reader, self.clock = reader, clock
        self.every_s, self.keep_s, self.stale_agent_s = every_s, keep_s, stale_agent_s
        self.tracks: dict[str, _Track] = {}

    # ---- one read -----------------------------------------------------------------
    def read(self) -> dict:
        t0, trips0 = time.perf_counter(), self.reader.round_trips
        now = self.clock()
        idx = self.reader.many([JOBS_KEY, keys.AGENTS_KEY])
        names = keys.names(idx[JOBS_KEY], MAX_JOBS)
        hosts = keys.names(idx[keys.AGENTS_KEY], MAX_AGENTS)
        for gone in [j for j in self.tracks if j not in names]:
            del self.tracks[gone]
        # Keys a job holds once it runs, at once; those it seldom holds, one by one
        # (a missing key costs a halving of the list it is in: reader.py).
        own = self.reader.many([keys.job_key(j, k) for j in names for k in ("gen", "joinseq", "status/job", "created")])
        for j in names:
            own[keys.job_key(j, "end")] = self.reader.get(keys.job_key(j, "end"))
        jobs = [self._job(j, own, now) for j in names]
        want = [keys.job_key(j["name"], f"status/m/{mid}") for j in jobs for mid in j.pop("_ids")]
        got = self.reader.many(want + [keys.agent_key(h) for h in hosts])
        for j in jobs:
            self._members(j, got, now)
        agents = self._agents(hosts, got, jobs, now)
        counts: dict[str, int] = {}
        for a in agents:
            counts[a["shown"]] = counts.get(a["shown"], 0) + 1
        return {"time": round(now, 3), "every_s": self.every_s, "jobs": jobs, "agents": agents,
                "counts": counts, "store": {"address": self.reader.describe, "keys": self.reader.num_keys(),
                                            "read_ms": round((time.perf_counter() - t0) * 1e3, 2),
                                            "round_trips": self.reader.round_trips - trips0 + 1}}

    # ---- a job --------------------------------------------------------------------
    def _job(self, name: str, own: dict, now: float) -> dict:
        k = lambda x: keys.job_key(name, x)  # noqa: E731
        tr = self.tracks.get(name)
        if tr is None:
            tr = self.tracks[name] = _Track(self.every_s, self.keep_s)
        made = keys.loads(own[k("created")]).get("incarnation")
        if made != tr.created:  # a new job of the same name
            if tr.created is not None:
                tr.forget()
            tr.created = made
        try:
            n = int(own[k("gen")].decode()) if own[k("gen")] else -1
        except ValueError:
            n = -1
        while self.reader.has(k(f"g/{n + 1}")):  # a writer may have died before moving gen
            n += 1
        if tr.records and n < max(tr.records):  # the store restarted and lost it
            tr.forget()
            tr.created = made
        rec, error = self._records(name, tr, n, now)
        tr.watched = True
        status = keys.loads(own[k("status/job")])
        self._history(name, tr, n, now)
        try:
            joinseq = int(own[k("joinseq")].decode()) if own[k("joinseq")] else 0
        except ValueError:
            joinseq = 0
        try:  # {"step": S}, or {"step": null}: at once (-1)
            end = json.loads(own[k("end")].decode()).get("step") if own[k("end")] else None
            end = -1 if own[k("end")] and end is None else end
        except (ValueError, AttributeError):
            end = None
        sgen = keys.integer(status.get("generation"), 0)
        fresh = sgen is not None and sgen <= n and rec is not None and rec.live
        step = rec.step if rec is not None else None
        if fresh and keys.integer(status.get("step"), 0) is not None:
            step = max(step, status["step"])
        if step != tr.step:
            tr.step, tr.step_at = step, now
        steps = keys.integer(status.get("steps"), 0) if fresh else None
        end_at = keys.integer(end, -1) if end is not None else None
        ends = [x for x in (steps, end_at) if x is not None and x >= 0]
        target = min(ends) if ends else None
        step_s = keys.num(status.get("step_s"), 0) if fresh else None
        rate = keys.num(status.get("samples_per_s"), 0) if fresh else None
        loss = keys.num(status.get("loss")) if fresh else None
        state = state_of(rec) if error is None else "unreadable"
        world = len(rec.members) if rec is not None else 0
        if state == "running" and rate is not None:
            tr.series.offer(now, rate, world, step, loss)
        elif state != "running":
            tr.series.offer(now, 0.0 if rec is not None else None, world, step, None)
        changes = self._timeline(tr, n)
        by_cause: dict[str, int] = {}
        for c in changes:
            by_cause[c["cause"]] = by_cause.get(c["cause"], 0) + 1
        return {"name": name, "state": state, "generation": n, "error": error,
                "cause": rec.cause.value if rec is not None else None, "world": world,
                "step": step, "steps": steps, "target": target,
                "progress": round(step / target, 4) if step is not None and target else None,
                "eta_s": round((target - step) * step_s, 1) if target and step is not None and step_s
                and state == "running" else None,
                "samples_per_s": rate if state == "running" else None, "step_s": step_s, "loss": loss,
                "waiting": max(0, joinseq - (rec.admitted if rec is not None else 0)),
                "end_at": end_at, "checkpoint": keys.text(rec.checkpoint, 300) if rec is not None else "",
                "stopped_by": keys.text(decisions.describe_error(rec.error), 500) if rec is not None and rec.error
                else "",
                "refused": [{"id": keys.text(i, keys.NAME_MAX), "why": keys.text(w)}
                            for i, w in list(rec.refused.items())[:5]] if rec is not None else [],
                "last_step_age_s": round(now - tr.step_at, 1),
                "status_age_s": round(now - status["time"], 1) if fresh and keys.num(status.get("time"))
                else None,
                "changes": changes[-MAX_CHANGES:], "changes_by_cause": by_cause,
                "stall_s_total": round(sum(c["stall_s"] or 0.0 for c in changes), 3),
                "series": tr.series.points(),
                "members": [], "_ids": list(rec.members) if rec is not None and rec.live else []}

    def _records(self, name: str, tr: _Track, n: int, now: float) -> tuple[Generation | None, str | None]:
        """Generation n's record (and, while the job has no history key, the
        ones before it that are not known yet), each read once."""
        if n < 0:
            return None, None
        first = max(0, n - RECORDS_BACK + 1) if not tr.history else n
        missing = [m for m in range(first, n + 1) if m not in tr.from_records or (m == n and n not in tr.records)]
        if missing:
            got = self.reader.many([keys.job_key(name, f"g/{m}") for m in missing])
            for m in missing:
                raw = got[keys.job_key(name, f"g/{m}")]
                if raw is None:
                    continue
                try:
                    tr.records[m] = Generation.from_json(raw, f"generation {m} of job {name!r}")
                except RecordError as e:
                    if m == n:
                        return None, keys.text(str(e), 300)
                    continue
                # Records carry no time: when this coordinator first saw them
                # (none for those it found on its first look).
                tr.seen.setdefault(m, now if tr.watched else None)
            for m in sorted(missing):
                if m in tr.records and m not in tr.from_records:
                    prev, r = tr.records.get(m - 1), tr.records[m]
                    before = set(prev.members) if prev is not None else set()
                    tr.from_records[m] = _change({
                        "generation": m, "cause": r.cause.value, "world": len(r.members), "step": r.step,
                        "joined": [x for x in r.members if x not in before] if prev is not None or m == 0 else [],
                        "left": [x for x in prev.members if x not in set(r.members)] if prev is not None else [],
                        "time": tr.seen.get(m), "seen": True})
            # Only the newest two records are kept whole (their members are read and diffed).
            for m in [m for m in tr.records if m < n - 1]:
                del tr.records[m]
            for m in sorted(tr.from_records)[:-1000]:
                del tr.from_records[m]
                tr.seen.pop(m, None)
        return tr.records.get(n), None

    def _history(self, name: str, tr: _Track, n: int, now: float) -> None:
        """Reads the job's history key when a change is due in it (at most
        once a second) and every 30 s otherwise."""
        if not ((tr.history_n < n and now - tr.history_at >= 1.0) or now - tr.history_at >= 30.0):
            return
        tr.history_at = now
        raw = self.reader.get(keys.job_key(name, "history"))
        if raw is None:
            return
        out: list[dict] = []
        for line in raw.decode(errors="replace").splitlines()[-1000:]:
            try:
                c = _change(json.loads(line)) if line.strip() else None
            except ValueError:
                c = None
            if c is not None:
                out.append(c)
        tr.history = out
        tr.history_n = max((c["generation"] for c in out), default=-1)

    def _timeline(self, tr: _Track, n: int) -> list[dict]:
        """The history's changes, then those of later records (a history line
        is written once the change is done, its record before)."""
        last = tr.history_n
        later = [tr.from_records[m] for m in sorted(tr.from_records) if m > last and m <= n]
        return tr.history + later

    # ---- members and agents ------------------------------------------------------------
    def _members(self, j: dict, got: dict, now: float) -> None:
        tr = self.tracks[j["name"]]
        rec = tr.records.get(j["generation"])
        if rec is None or not rec.live:
            return
        rows = []
        for rank, mid in enumerate(rec.members):
            s = keys.loads(got.get(keys.job_key(j["name"], f"status/m/{mid}")))
            t = keys.num(s.get("time"), 0)
            rows.append({"rank": rank, "id": keys.text(mid, keys.NAME_MAX),
                         "host": keys.text(s.get("host"), keys.NAME_MAX) or mid.split(":")[0][:keys.NAME_MAX],
                         "pid": keys.integer(s.get("pid"), 0), "generation": keys.integer(s.get("generation"), 0),
                         "step_s": keys.num(s.get("step_s"), 0), "samples_per_s": keys.num(s.get("samples_per_s"), 0),
                         "boundary_s": keys.num(s.get("boundary_s"), 0), "skipped": keys.integer(s.get("skipped"), 0),
                         "share": keys.integer(s.get("share"), 0), "straggler": keys.text(s.get("straggler")) or None,
                         "wire_sent_Bps": keys.num(s.get("wire_sent_Bps"), 0),
                         "wire_received_Bps": keys.num(s.get("wire_received_Bps"), 0),
                         "age_s": round(now - t, 1) if t is not None else None})
        waits = [r["boundary_s"] for r in rows if r["boundary_s"] is not None]
        mid_wait = statistics.median(waits) if waits else None
        for r in rows:
            # At the boundary everybody waits for the last to arrive: the one
            # that waits least is the one the others wait for.
            r["lag_s"] = round(mid_wait - r["boundary_s"], 5) if mid_wait is not None and r["boundary_s"] is not None \
                else None
            r["stale"] = r["age_s"] is None or r["age_s"] > STALE_MEMBER_S
        j["members"] = rows
        j["slowest"] = sorted(rows, key=lambda r: (not r["stale"], -(r["lag_s"] or 0.0)))[:5] if rows else []
        # Noise is not a straggler: at least 1 ms, and 2 % of the step.
        floor = max(0.001, 0.02 * (j["step_s"] or 0.0))
        j["slowest"] = [r for r in j["slowest"] if r["stale"] or (r["lag_s"] or 0) > floor]

    def _agents(self, hosts: list[str], got: dict, jobs: list[dict], now: float) -> list[dict]:
        """The machines: every agent, and every member host no agent reports.
        An agent's worker is a member when a member runs on its host, or
        has its worker's pid (an agent named otherwise than its hostname:
        [fleet] host)."""
        on_host: dict[str, str] = {}               # member host -> its job
        on_pid: dict[int, tuple[str, str]] = {}    # member pid -> (job, member host)
        for j in jobs:
            for r in j["members"]:
                on_host.setdefault(r["host"], j["name"])
                if r["pid"]:
                    on_pid[r["pid"]] = (j["name"], r["host"])
        out, claimed = [], set()
        for h in hosts:
            a = keys.loads(got.get(keys.agent_key(h)))
            t = keys.num(a.get("time"), 0)
            known = a.get("state") in keys.AGENT_STATES
            state = a.get("state") if known else ("error" if a else "away")
            reason = keys.text(a.get("reason")) if known else ("unknown state" if a else "its agent has not written")
            job, pid = keys.text(a.get("job"), keys.NAME_MAX), keys.integer(a.get("pid"), 0)
            member_of = on_host.get(h)
            if member_of is None and pid in on_pid:
                member_of = on_pid[pid][0]
                claimed.add(pid)
            age = round(now - t, 1) if t is not None else None
            shown = state
            if age is not None and age > self.stale_agent_s:
                shown, reason = "away", f"no word from its agent for {age:.0f} s (asleep, off, or off the network)"
            elif state == "training" and member_of is None:
                shown = "waiting"
                reason = f"its worker runs; {('job ' + job) if job else 'no job'} has not admitted it yet"
            out.append({"host": h, "state": state, "shown": shown, "reason": reason,
                        "since": keys.num(a.get("since"), 0), "job": member_of or job, "pid": pid,
                        "age_s": age, "agent": True})
        agents = set(hosts)
        bare: dict[str, str] = {}
        for j in jobs:
            for r in j["members"]:
                if r["host"] not in agents and r["pid"] not in claimed:
                    bare.setdefault(r["host"], j["name"])
        for h, j in sorted(bare.items()):
            out.append({"host": h, "state": None, "shown": "training", "reason": "a member of the job "
                        "(no agent reports this machine)", "since": None, "job": j, "pid": None,
                        "age_s": None, "agent": False})
        return out
