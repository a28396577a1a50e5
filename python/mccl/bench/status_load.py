"""`mccl-bench status-load`: the status page at fleet scale.

A coordinator (`mccl elastic serve`, its own process) and, in this process,
a simulated fleet writing the keys as the real writers would, at their real
rates: --members members of two jobs (each its status every 2 s, rank 0 the
job's; publish.member_status), --agents agents (publish.AgentPublisher, each
with its own thread and connection: on each change and every 5 s), a
membership change every --change-s in the big job (a generation record and
a history line, as the members write them), --viewers browsers polling
/api/fleet every second and a Prometheus scrape every 15 s. Measured:

- the coordinator's CPU (its process, /proc/PID/stat) over --seconds, as a
  share of one core; the target is under 5 %;
- the page's load: /, its assets and the first /api/fleet over HTTP (median
  and worst of --loads), and with headless Chromium (Selenium) where it is
  installed, from navigation to the first rendered fleet; target under 1 s;
- the member side: the real Job._publish_status on a member's status
  thread, per publish (median, p99), its bytes per member, and its share of
  a --step-ms step (one publish per 2 s, off the training loop's thread).

    mccl-bench status-load                         # 200 members, 220 agents, 60 s
    mccl-bench status-load --members 400 --seconds 120 --json load.json
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import types
import urllib.request
import uuid

from ..elastic.dashboard import keys, publish
from ..elastic.membership import Membership
from ..elastic.records import Cause, Generation
from ..elastic.store import connect

_TIMEOUT = datetime.timedelta(seconds=30)
REASONS = {  # what agents that are not training say (policy.decide's wording)
    "ineligible": ["idle 3.2 min < 15 min", "09:14 is outside the window 20:00-08:00", "on battery",
                   "input seen (idle 2 s, was 1500 s): the person is back"],
    "idle": ["idle 22.0 min, in the window, on AC; next start in 10 s"],
    "error": ["cannot read activity (ioreg output has no HIDIdleTime)"],
}


def fake_member(member_id: str, gen: int, rec: Generation, step: int, step_s: float, batch: int):
    """What Job._publish_status reads of a Job, for a member that trains at step_s."""
    return types.SimpleNamespace(
        id=member_id, generation=gen, record=rec, _pid=int(member_id.split(":")[1]),
        _step_times=collections.deque([(step_s, batch)] * 20, maxlen=20),
        boundary_s=collections.deque([0.002 + random.random() * 0.01] * 20, maxlen=1000), skipped=[],
        _end_at=None, _last_loss=2.5, _status_at=0.0, _step_of_error=step, steps=100_000)


class SimJob:
    """One job's members, writing as real members do."""

    def __init__(self, store: str, name: str, hosts: list[str], step_s: float = 0.3, batch: int = 32):
        self.store, self.name, self.step_s, self.batch = store, name, step_s, batch
        self.m = Membership(connect(store, _TIMEOUT), name)
        self.m.store.patience = 10.0
        self.hosts = list(hosts)
        self.ids = [f"{h}:{10000 + i}:{uuid.uuid4().hex[:6]}" for i, h in enumerate(hosts)]
        self.spare: list[str] = []
        self.t0 = time.monotonic()
        self.gen = -1
        self.rec: Generation | None = None
        self.publish_s: list[float] = []
        self.value_bytes: list[int] = []
        self.published: set[tuple[str, int]] = set()
        self.timed_from = float("inf")  # publish times are kept from then on (not the connection storm's)
        self._conns: dict[str, Membership] = {}

    def found(self) -> None:
        self.m.create(uuid.uuid4().hex[:12])
        self.m.list_job()
        self.m.store.add(self.m.key("joinseq"), len(self.ids))
        self._publish(Cause.START, self.ids, joined=self.ids, left=[])

    def _publish(self, cause: Cause, members: list[str], joined: list[str], left: list[str]) -> None:
        n = self.gen + 1
        rec = Generation(members=tuple(members), admitted=len(members) + n, cause=cause, step=self.step(),
                         incarnation="sim")
        self.m.publish(n, rec)
        self.gen, self.rec = n, rec
        line = {"generation": n, "cause": cause.value, "world": len(members), "joined": joined, "left": left,
                "stall_s": round(random.uniform(0.4, 3.0), 3), "step": rec.step, "time": time.time()}
        self.m.store.append(self.m.key("history"), json.dumps(line, separators=(",", ":")) + "\n")

    def step(self) -> int:
        return int((time.monotonic() - self.t0) / self.step_s)

    def change(self) -> str:
        """A join, a leave or a crash, as the next generation."""
        ids = list(self.rec.members)
        kind = random.choice(["join", "leave", "crash"]) if self.spare else random.choice(["leave", "crash"])
        if kind == "join":
            back = self.spare.pop()
            self._publish(Cause.JOIN, ids + [back], joined=[back], left=[])
        else:
            gone = random.choice(ids[1:])
            self.spare.append(gone)
            self._publish(Cause.LEAVE if kind == "leave" else Cause.CRASH, [i for i in ids if i != gone],
                          joined=[], left=[gone])
        return kind

    def tick(self, member_id: str, m: Membership, fake) -> None:
        """One watcher tick of one member (the real rate limit)."""
        rec = self.rec
        if member_id not in rec.members:
            return
        fake.record, fake.generation, fake._step_of_error = rec, self.gen, self.step()
        if time.monotonic() < fake._status_at:
            return
        fake._status_at = time.monotonic() + publish.STATUS_EVERY_S
        t0 = time.perf_counter()
        host = member_id.split(":")[0]
        mine = publish.member_status(fake, rec.members.index(member_id), host=host)
        value = keys.dumps(mine)
        m.set(f"status/m/{member_id}", value)
        if mine["rank"] == 0:
            m.set("status/job", keys.dumps(publish.job_status(fake, mine)))
        if time.monotonic() >= self.timed_from:
            self.publish_s.append(time.perf_counter() - t0)
        self.value_bytes.append(len(value) + len(m.key(f"status/m/{member_id}")))
        self.published.add((member_id, 0))


class SimFleet:
    """Jobs of simulated members and simulated agents, writing to the store at `store`."""

    def __init__(self, store: str, members: int = 200, agents: int = 220, threads: int = 8,
                 change_s: float = 20.0, seed: int = 1):
        random.seed(seed)
        self.store, self.change_s = store, change_s
        hosts = [f"mac-{i:03d}" for i in range(max(members, agents))]
        big = max(1, int(members * 0.75))
        self.jobs = [SimJob(store, "vit", hosts[:big])]
        if members > big:
            self.jobs.append(SimJob(store, "diffusion", hosts[big:members], step_s=0.5, batch=16))
        self.agent_hosts = hosts[:agents]
        self.members_of = {h: j for j in self.jobs for h in j.hosts}
        self.publishers: list[publish.AgentPublisher] = []
        self.threads = threads
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.changes: list[tuple[float, str, str]] = []
        self.silent: set[str] = set()

    def start(self) -> None:
        for j in self.jobs:
            j.found()
        slots = [(j, mid) for j in self.jobs for mid in j.ids]
        for k in range(self.threads):
            mine = slots[k::self.threads]
            t = threading.Thread(target=self._members, args=(mine,), daemon=True, name=f"sim-members-{k}")
            t.start()
            self._workers.append(t)
        for h in self.agent_hosts:
            job = self.members_of.get(h)
            self.publishers.append(publish.AgentPublisher(self.store, host=h, job=job.name if job else "vit"))
        # Some machines go to sleep (their agent writes once, then no more: the page shows them away).
        self.silent = {h for h in self.agent_hosts if h not in self.members_of and random.random() < 0.15}
        for h, p in zip(self.agent_hosts, self.publishers):
            if h in self.silent:
                p.offer("idle", "idle 16.0 min, in the window", None)
        for target in (self._agents, self._changes):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._workers.append(t)

    def wait_connected(self, timeout_s: float = 120.0) -> float:
        """Until every agent and member wrote once (a connection storm on a
        store whose host's DNS drops queries takes a while: the TCPStore
        server looks every peer up). Returns the seconds it took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            members = sum(len({i for i, _ in j.published}) for j in self.jobs)
            if all(p.written for p in self.publishers) and members >= sum(len(j.ids) for j in self.jobs) * 0.95:
                break
            time.sleep(0.5)
        return time.monotonic() - t0

    def _members(self, slots) -> None:
        conns = {}
        fakes = {}
        for j, mid in slots:
            m = Membership(connect(self.store, _TIMEOUT), j.name)
            m.store.patience = 0.0
            conns[mid] = m
            fakes[mid] = fake_member(mid, j.gen, j.rec, j.step(), j.step_s, j.batch)
            fakes[mid]._status_at = time.monotonic() + random.random() * publish.STATUS_EVERY_S
        while not self._stop.wait(0.2):  # the watcher's tick
            for j, mid in slots:
                try:
                    j.tick(mid, conns[mid], fakes[mid])
                except Exception:  # noqa: BLE001 - dropped, as a member drops it
                    pass

    def _agents(self) -> None:
        plan = {}
        for i, h in enumerate(self.agent_hosts):
            if h not in self.members_of:
                state = random.choice(["ineligible", "ineligible", "idle", "error"])
                plan[h] = (state, random.choice(REASONS[state]))
        while not self._stop.wait(2.0):  # the agent's check_every_s
            for h, p in zip(self.agent_hosts, self.publishers):
                if h in self.silent:
                    p.close(0.0)  # asleep
                    continue
                job = self.members_of.get(h)
                if job is not None:
                    mid = next((i for i in job.ids if i.startswith(h + ":")), None)
                    p.offer("training" if mid in job.rec.members else "idle",
                            "idle 42.0 min, in the window, on AC", int(mid.split(":")[1]) if mid else None)
                else:
                    p.offer(plan[h][0], plan[h][1], None)

    def _changes(self) -> None:
        while not self._stop.wait(self.change_s):
            j = self.jobs[0]
            self.changes.append((time.time(), j.name, j.change()))

    def stop(self) -> None:
        self._stop.set()
        for p in self.publishers:
            p.close(0.0)
        for p in self.publishers:
            p.close(6.0)
        for t in self._workers:
            t.join(timeout=5)

    def publish_stats(self) -> dict:
        times = sorted(t for j in self.jobs for t in j.publish_s)
        sizes = [b for j in self.jobs for b in j.value_bytes]
        if not times:
            return {}
        return {"publishes": len(times), "median_ms": statistics.median(times) * 1e3,
                "p99_ms": times[int(0.99 * (len(times) - 1))] * 1e3, "bytes_per_member": max(sizes)}


# ---- the coordinator ------------------------------------------------------------------
def start_coordinator(sample_s: float = 10.0, env=None, host: str = "127.0.0.1",
                      prefix: list[str] | None = None) -> tuple[subprocess.Popen, str, str]:
    """`mccl elastic serve` on `host` (loopback, or a lab host's address with
    its `prefix`), free ports; returns (process, store address, page URL)."""
    cmd = list(prefix or []) + [sys.executable, "-m", "mccl.cli", "elastic", "serve", "--host", host, "--port", "0",
                                "--http-port", "0", "--sample-s", str(sample_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    store = url = ""
    lines = []
    end = time.monotonic() + 60
    while (not store or not url) and time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"store listening on ([\d.]+):(\d+)", line)
        if m:
            store = f"{host}:{m.group(2)}"
        m = re.search(r"status page on http://[^:]+:(\d+)/", line)
        if m:
            url = f"http://{host}:{m.group(1)}"
        if "not served" in line:
            break
    if not store or not url:
        proc.kill()
        raise RuntimeError("mccl-bench status-load: the coordinator did not start:\n" + "".join(lines))
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # keep draining
    return proc, store, url


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(url: str, headers: dict | None = None, timeout: float = 10.0) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def http_load(url: str) -> float:
    """Seconds to fetch the page, its assets and the data it draws, one after another."""
    t0 = time.perf_counter()
    for path in ("/", "/static/style.css", "/static/app.js", "/api/fleet"):
        get(url + path, {"Accept-Encoding": "gzip"})
    return time.perf_counter() - t0


def browser_load(url: str, loads: int = 3) -> list[float] | str:
    """Seconds from navigation to the first rendered fleet in headless
    Chromium; or why it could not be measured."""
    try:
        from selenium import webdriver
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return "selenium is not installed"
    try:
        d = make_driver()
    except Exception as e:  # noqa: BLE001
        return f"no headless Chromium ({str(e).splitlines()[0][:120]})"
    out = []
    try:
        for _ in range(loads):
            d.get("about:blank")
            t0 = time.perf_counter()
            d.get(url + "/")
            WebDriverWait(d, 10, poll_frequency=0.01).until(
                lambda drv: drv.execute_script("return document.body.dataset.updated || ''"))
            out.append(time.perf_counter() - t0)
    finally:
        d.quit()
    return out


def make_driver(width: int = 1400, height: int = 1000):
    """Headless Chromium through Debian's chromium-driver."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={width},{height}"):
        opts.add_argument(a)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary:
        opts.binary_location = binary
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(service=Service(driver), options=opts)


def _viewer(url: str, stop: threading.Event, counts: list) -> None:
    while not stop.wait(1.0):
        try:
            get(url + "/api/fleet", {"Accept-Encoding": "gzip"})
            counts[0] += 1
        except OSError:
            counts[1] += 1


def member_cost(store: str, step_ms: float, rounds: int = 300) -> dict:
    """The real Job._publish_status of one member (rank 0: both its values),
    timed against the coordinator's store; rate limit lifted for the count."""
    from ..elastic.job import Job
    m = Membership(connect(store, _TIMEOUT), "cost")
    m.store.patience = 0.0
    rec = Generation(members=tuple(f"mac-{i:03d}:{20000 + i}:abcdef" for i in range(200)), admitted=200,
                     cause=Cause.START)
    m.store.check([m.key("x")], patience=30.0)  # connected (the watcher's connection is, too)
    out = {}
    for rank in (0, 1):
        fake = fake_member(rec.members[rank], 0, rec, 1234, step_ms / 1e3, 32)
        times = []
        for i in range(rounds):
            fake._status_at = 0.0
            t0 = time.perf_counter()
            Job._publish_status(fake, m, i)
            times.append(time.perf_counter() - t0)
            if fake._status_at == 0.0:
                raise RuntimeError("mccl-bench status-load: Job._publish_status did not publish "
                                   f"(store away: {m.store.health.away})")
        times.sort()
        out[f"rank{rank}"] = {"median_ms": statistics.median(times) * 1e3,
                              "p99_ms": times[int(0.99 * (len(times) - 1))] * 1e3}
    member = m.store.get(m.key(f"status/m/{rec.members[1]}"))
    job = m.store.get(m.key("status/job"))
    out["member_value_bytes"] = len(member)
    out["job_value_bytes"] = len(job)
    out["member_key_bytes"] = len(m.key(f"status/m/{rec.members[1]}"))
    med = out["rank0"]["median_ms"] / 1e3
    out["share_of_step"] = med / publish.STATUS_EVERY_S  # one publish per 2 s, off the loop's thread
    out["bytes_per_s_per_member"] = (out["member_value_bytes"] + out["member_key_bytes"]) / publish.STATUS_EVERY_S
    return out


def run(args) -> dict:
    proc, store, url = start_coordinator(sample_s=args.sample_s)
    fleet = SimFleet(store, members=args.members, agents=args.agents, change_s=args.change_s)
    stop = threading.Event()
    result: dict = {"members": args.members, "agents": args.agents, "viewers": args.viewers, "seconds": args.seconds}
    try:
        print(f"# coordinator pid {proc.pid}: store {store}, page {url}", flush=True)
        t = time.monotonic()
        fleet.start()
        took = fleet.wait_connected()
        print(f"# {args.members} members in {len(fleet.jobs)} jobs and {args.agents} agents writing "
              f"({took:.1f} s until all had written); settling {args.settle_s:g} s", flush=True)
        time.sleep(args.settle_s)
        counts = [0, 0]
        viewers = [threading.Thread(target=_viewer, args=(url, stop, counts), daemon=True) for _ in range(args.viewers)]
        for v in viewers:
            v.start()

        def scrape():
            while not stop.wait(15.0):
                try:
                    get(url + "/metrics")
                except OSError:
                    pass
        threading.Thread(target=scrape, daemon=True).start()
        for j in fleet.jobs:
            j.timed_from = time.monotonic()
        c0, w0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.seconds)
        c1, w1 = cpu_seconds(proc.pid), time.monotonic()
        cpu = 100.0 * (c1 - c0) / (w1 - w0)
        snap = json.loads(get(url + "/api/fleet"))
        loads = sorted(http_load(url) for _ in range(args.loads))
        browser = browser_load(url) if not args.no_browser else "not asked (--no-browser)"
        stop.set()
        cost = member_cost(store, args.step_ms)
        api_bytes = len(get(url + "/api/fleet"))
        api_gz = len(get(url + "/api/fleet", {"Accept-Encoding": "gzip"}))
        result.update({
            "coordinator_cpu_percent": cpu, "viewer_polls": counts[0], "viewer_errors": counts[1],
            "snapshot_read_ms": snap["store"]["read_ms"], "snapshot_round_trips": snap["store"]["round_trips"],
            "store_keys": snap["store"]["keys"], "rss_mb": snap["coordinator"]["rss_mb"],
            "jobs_seen": {j["name"]: j["world"] for j in snap["jobs"]}, "agents_seen": len(snap["agents"]),
            "counts": snap["counts"], "changes": len(fleet.changes),
            "http_load_s": {"median": statistics.median(loads), "max": loads[-1]},
            "browser_load_s": browser, "api_bytes": api_bytes, "api_gzip_bytes": api_gz,
            "sim_publish": fleet.publish_stats(), "member_cost": cost, "step_ms": args.step_ms})
    finally:
        stop.set()
        fleet.stop()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


def report(r: dict) -> None:
    c = r["member_cost"]
    b = r["browser_load_s"]
    browser = (f"median {statistics.median(b):.3f} s, max {max(b):.3f} s" if isinstance(b, list) else b)
    print(f"status-load: {r['members']} members ({', '.join(f'{k} {v}' for k, v in r['jobs_seen'].items())}), "
          f"{r['agents']} agents ({r['agents_seen']} machines shown: "
          f"{', '.join(f'{v} {k}' for k, v in sorted(r['counts'].items()))}), {r['viewers']} viewers polling "
          f"every second, {r['changes']} membership changes, over {r['seconds']:g} s")
    print(f"  coordinator CPU: {r['coordinator_cpu_percent']:.2f} % of one core (target < 5 %); "
          f"RSS {r['rss_mb']:.0f} MB; {r['store_keys']} store keys")
    print(f"  snapshot: {r['snapshot_read_ms']:.1f} ms, {r['snapshot_round_trips']} round trips to the store; "
          f"/api/fleet {r['api_bytes'] / 1e3:.0f} kB ({r['api_gzip_bytes'] / 1e3:.0f} kB gzip)")
    print(f"  page load over HTTP (/, assets, /api/fleet): median {r['http_load_s']['median']:.3f} s, "
          f"max {r['http_load_s']['max']:.3f} s; in headless Chromium to the first rendered fleet: {browser} "
          f"(target < 1 s)")
    print(f"  member side (Job._publish_status, real code): rank 0 {c['rank0']['median_ms']:.3f} ms "
          f"(p99 {c['rank0']['p99_ms']:.3f}), others {c['rank1']['median_ms']:.3f} ms per publish, one per "
          f"{publish.STATUS_EVERY_S:g} s on the watcher thread: {100 * c['share_of_step']:.4f} % of the time "
          f"(target < 0.5 % of the step); {c['member_value_bytes']} B value + {c['member_key_bytes']} B key per "
          f"member ({c['bytes_per_s_per_member']:.0f} B/s; {c['bytes_per_s_per_member'] * r['members'] / 1e3:.1f} "
          f"kB/s at {r['members']} members), rank 0's job value {c['job_value_bytes']} B")
    s = r["sim_publish"]
    if s:
        print(f"  simulated members under load (the measured stretch): {s['publishes']} publishes, "
              f"median {s['median_ms']:.3f} ms, "
              f"p99 {s['p99_ms']:.3f} ms, {s['bytes_per_member']} B per member")
