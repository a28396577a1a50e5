"""The status page in a real browser, following a live elastic job on
loopback and on the network lab: `mccl elastic serve` (store and page), four `mccl agent run`
processes (file activity sources) that start the workers of
workers/elastic_worker.py, headless Chromium driven by Selenium through
Debian's chromium-driver. Three founders start; a fourth machine joins;
one machine's person comes back (its agent SIGTERMs the worker: a graceful
leave); one worker is killed with SIGKILL (a crash). Each membership change
must be on the page within 2 s of its record being in the store, each
machine's state within 2 s of its agent writing it, and /metrics must say
what /api/fleet says. MCCL_STATUS_SCREENSHOT=PATH saves the page during the
run (docs/img/status-page.png is one, taken with MCCL_STATUS_SCREENSHOT_WAIT_S=40)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from mccl.bench.status_load import make_driver, start_coordinator
from mccl.elastic.dashboard import keys
from mccl.elastic.membership import Membership
from mccl.elastic.store import connect

pytestmark = pytest.mark.slow

WORKERS = Path(__file__).parent / "workers"
PAGE_WITHIN_S = 2.0
# What a page poll sees: the job's generation, world and changes, every machine's state.
PAGE_STATE = """
const j = document.querySelector('[data-job="test"]');
const tiles = {};
for (const t of document.querySelectorAll('.tile')) tiles[t.dataset.host] = t.dataset.state;
return {gen: j ? Number(j.dataset.generation) : -1, world: j ? Number(j.dataset.world) : 0,
        changes: j ? [...j.querySelectorAll('tr[data-cause]')].map(r => [Number(r.dataset.generation), r.dataset.cause]) : [],
        tiles};
"""


def _browser_or_skip():
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("needs selenium (pip install selenium)")
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/setup.sh installs them)")
    try:
        return make_driver(1400, 2000)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"headless Chromium does not start here: {str(e).splitlines()[0][:200]}")


class Machines:
    """`mccl agent run` processes, one per simulated Mac, each with its own
    activity file; on a network lab, Mac i is lab host i + 1 (host 0 runs
    the coordinator)."""

    def __init__(self, store: str, tmp: Path, lab=None):
        self.store, self.tmp, self.lab = store, tmp, lab
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, host: str, worker_args: list[str]) -> None:
        idle = self.tmp / f"idle-{host}"
        idle.write_text("3600\n")
        # A leaver takes 3 s to exit, so the page has time to show its agent
        # "stopping" (a leave alone now exits within about a second).
        cmd = [sys.executable, str(WORKERS / "elastic_worker.py"), "--store", self.store, "--sleep-ms", "150",
               "--exit-delay-s", "3", *worker_args]
        env = {"PYTHONPATH": str(WORKERS) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
        prefix = []
        if self.lab is not None:
            h = len(self.procs) + 1
            prefix = self.lab.prefix(h)
            env.update(self.lab.rank_env(h))
        cfg = self.tmp / f"agent-{host}.toml"
        cfg.write_text(f"""
[rules]
idle_minutes = 1
require_ac = false
[activity]
source = "file"
file = "{idle}"
[worker]
command = {json.dumps(cmd)}
env = {{ {", ".join(f'{k} = {json.dumps(v)}' for k, v in env.items())} }}
leave_deadline_s = 20
check_every_s = 0.5
[fleet]
store = "{self.store}"
job = "test"
host = "{host}"
publish_every_s = 2
""")
        log = open(self.tmp / f"agent-{host}.log", "w")
        self.procs[host] = subprocess.Popen(prefix + [sys.executable, "-m", "mccl.cli", "agent", "run",
                                                      "--config", str(cfg)],
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def person_back(self, host: str) -> None:
        (self.tmp / f"idle-{host}").write_text("0\n")

    def logs(self) -> str:
        return "\n".join(f"--- agent {h}\n{(self.tmp / f'agent-{h}.log').read_text()[-3000:]}" for h in self.procs)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


class StoreWatch:
    """When each generation and each agent's state first appeared in the store (this process's clock)."""

    def __init__(self, store: str):
        self.m = Membership(connect(store, datetime.timedelta(seconds=30)), "test")
        self.m.store.patience = 10.0
        self.gens: dict[int, tuple[str, int, float]] = {}
        self.agents: dict[tuple[str, str], float] = {}
        self.pids: dict[str, int] = {}
        self._stop = False
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop:
            try:
                n = self.m.latest()
                for k in range(max(0, n - 3), n + 1):
                    if k not in self.gens and self.m.has(f"g/{k}"):
                        rec = self.m.generation(k)
                        self.gens[k] = (rec.cause.value, len(rec.members), time.monotonic())
                raw = self.m.store.get(keys.AGENTS_KEY) if self.m.store.check([keys.AGENTS_KEY]) else b""
                for h in keys.names(raw, 100):
                    v = json.loads(self.m.store.get(keys.agent_key(h)))
                    self.agents.setdefault((h, v["state"]), time.monotonic())
                    if v.get("pid"):
                        self.pids[h] = v["pid"]
            except Exception:  # noqa: BLE001 - a key between two writes: next look
                pass
            time.sleep(0.05)

    def gen_of(self, cause: str, after: int = -1) -> int | None:
        got = [k for k, (c, _, _) in self.gens.items() if c == cause and k > after]
        return min(got) if got else None

    def stop(self) -> None:
        self._stop = True
        self._t.join(timeout=5)


@pytest.fixture(params=["loopback", pytest.param("lab", marks=pytest.mark.netlab)])
def where(request):
    """Loopback, or a 5-host network lab (1 Gbit/s): the coordinator on host
    0, a Mac on each other host, the browser on this machine's own address
    on the lab's switch."""
    if request.param == "loopback":
        yield None
        return
    from mccl.netlab import Lab
    missing = Lab.requirements(goodput=False)
    if missing:
        pytest.skip("network lab needs " + " and ".join(missing))
    lab = Lab.up(5, rate="1gbit", name="mcclpage")
    try:
        lab.attach_driver()
        yield lab
    finally:
        lab.down()


def test_the_page_follows_a_live_job_in_chromium(tmp_path, where):
    driver = _browser_or_skip()
    lab = where
    if lab is None:
        proc, store, url = start_coordinator(sample_s=1.0)
    else:
        proc, store, url = start_coordinator(sample_s=1.0, host=lab.hosts[0].address, prefix=lab.prefix(0))
    machines = Machines(store, tmp_path, lab)
    watch = StoreWatch(store)
    seen: dict[str, float] = {}   # what the page showed first, and when
    lag: dict[str, float] = {}    # from the store to the page, per change

    def page() -> dict:
        return driver.execute_script(PAGE_STATE)

    def wait_page(what: str, cond, timeout: float = 180.0) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = page()
            if cond(s):
                seen[what] = time.monotonic()
                return s
            time.sleep(0.05)
        raise AssertionError(f"the page never showed {what}: {page()}\nstore: {watch.gens} {watch.agents}\n"
                             f"{machines.logs()[-6000:]}")

    def change(cause: str, world: int, after: int = -1) -> int:
        """Waits for the change in the store, then for the page; the page may lag by 2 s at most."""
        end = time.monotonic() + 180
        while watch.gen_of(cause, after) is None and time.monotonic() < end:
            time.sleep(0.05)
        n = watch.gen_of(cause, after)
        assert n is not None, f"no {cause} generation in the store: {watch.gens}\n{machines.logs()}"
        wait_page(f"{cause} {n}", lambda s: s["gen"] >= n and [n, cause] in s["changes"], timeout=30)
        lag[f"generation {n} ({cause})"] = seen[f"{cause} {n}"] - watch.gens[n][2]
        assert watch.gens[n][1] == world, watch.gens
        return n

    def machine(host: str, state: str) -> None:
        wait_page(f"{host} {state}", lambda s: s["tiles"].get(host) == state, timeout=60)
        while (host, state) not in watch.agents:
            time.sleep(0.05)
        lag[f"{host} {state}"] = seen[f"{host} {state}"] - watch.agents[(host, state)]

    try:
        driver.get(url + "/")
        for h in ("mac-a", "mac-b", "mac-c"):
            machines.start(h, ["--initial", "3", "--create"])
        start = change("start", 3)
        for h in ("mac-a", "mac-b", "mac-c"):
            wait_page(f"{h} training", lambda s, h=h: s["tiles"].get(h) == "training", timeout=30)
        machines.start("mac-d", [])                      # a fourth Mac comes in
        wait_page("mac-d waiting", lambda s: s["tiles"].get("mac-d") == "waiting", timeout=60)  # not admitted yet
        join = change("join", 4, start)
        wait_page("mac-d training", lambda s: s["tiles"].get("mac-d") == "training", timeout=30)
        lag["mac-d admitted"] = seen["mac-d training"] - watch.gens[join][2]
        machines.person_back("mac-b")                    # its person is back: the agent SIGTERMs the worker
        machine("mac-b", "stopping")
        leave = change("leave", 3, join)
        machine("mac-b", "ineligible")
        os.kill(watch.pids["mac-c"], signal.SIGKILL)     # a crash
        crash = change("crash", 2, leave)
        machine("mac-c", "error")                        # the agent saw its worker die
        # /metrics says what /api/fleet says (the same snapshot: within 0.5 s of each other).
        for _ in range(20):
            api = json.loads(urllib.request.urlopen(url + "/api/fleet", timeout=10).read())
            text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
            job = next(j for j in api["jobs"] if j["name"] == "test")
            from prometheus_client.parser import text_string_to_metric_families
            m = {(s.name, tuple(sorted(s.labels.items()))): s.value
                 for f in text_string_to_metric_families(text) for s in f.samples}
            if m[("mccl_job_generation", (("job", "test"),))] == job["generation"]:
                break
        assert m[("mccl_job_members", (("job", "test"),))] == job["world"] == 2
        assert job["generation"] >= crash and m[("mccl_job_generation", (("job", "test"),))] == job["generation"]
        for cause in ("start", "join", "leave", "crash"):
            assert m[("mccl_job_changes_total", (("cause", cause), ("job", "test")))] == \
                job["changes_by_cause"][cause] >= 1
        for state, count in api["counts"].items():
            assert m[("mccl_agents", (("state", state),))] == count
        assert m[("mccl_job_state", (("job", "test"), ("state", "running")))] == 1.0
        assert m[("mccl_job_step", (("job", "test"),))] == job["step"] > 0
        # Each member's wire traffic (its sockets carry the all-reduces), on
        # the page's data and in /metrics.
        end = time.monotonic() + 20
        while True:
            api = json.loads(urllib.request.urlopen(url + "/api/fleet", timeout=10).read())
            rows = next(j for j in api["jobs"] if j["name"] == "test")["members"]
            if rows and all((r["wire_sent_Bps"] or 0) > 0 and (r["wire_received_Bps"] or 0) > 0 for r in rows):
                break
            assert time.monotonic() < end, f"no wire traffic on the page: {rows}"
            time.sleep(0.2)
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        sent = [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "mccl_member_wire_sent_bytes_per_second" and s.labels["job"] == "test"]
        assert sent and all(s.value > 0 for s in sent), sent

        # A picture of it (for the docs: a while longer, so that mac-c's agent
        # starts its worker again after its back-off and it joins again).
        time.sleep(float(os.environ.get("MCCL_STATUS_SCREENSHOT_WAIT_S", "3")))
        shot = tmp_path / "status-page.png"
        driver.save_screenshot(str(shot))
        if os.environ.get("MCCL_STATUS_SCREENSHOT"):
            shutil.copy(shot, os.environ["MCCL_STATUS_SCREENSHOT"])

        # The end: the job finishes; every agent stops and says so.
        watch.m.request_end(None)
        stopping = threading.Thread(target=machines.stop)  # the page is watched meanwhile
        stopping.start()
        away = {h: None for h in ("mac-a", "mac-b", "mac-c", "mac-d")}
        end = time.monotonic() + 60
        while None in away.values() and time.monotonic() < end:  # all at once: each one's first sight counts
            tiles = page()["tiles"]
            for h in away:
                if away[h] is None and tiles.get(h) == "away":
                    away[h] = time.monotonic()
            time.sleep(0.05)
        assert None not in away.values(), (away, page(), watch.agents)
        for h, t in away.items():
            lag[f"{h} away"] = t - watch.agents[(h, "away")]
        stopping.join()
        print("store -> page:", ", ".join(f"{k} {v:.2f} s" for k, v in lag.items()))
        late = {k: round(v, 2) for k, v in lag.items() if v > PAGE_WITHIN_S}
        assert not late, f"shown later than {PAGE_WITHIN_S} s after the store had it: {late}"
    finally:
        watch.stop()
        machines.stop()
        driver.quit()
        proc.terminate()
        proc.wait(timeout=10)
