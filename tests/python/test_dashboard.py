"""The fleet's status page against synthetic store contents (fast tier): the
snapshot of jobs, members, changes and machines; /api/fleet, /metrics and
the page agree; nothing secret is served; the token; the agent's and the
member's publishing (bounded, never blocking); `mccl elastic status --fleet`.
The live-job test in a real browser is test_dashboard_browser.py."""

from __future__ import annotations

import collections
import datetime
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch.distributed as dist

from mccl.elastic.dashboard import keys, publish
from mccl.elastic.dashboard.reader import StoreReader
from mccl.elastic.dashboard.series import Series
from mccl.elastic.dashboard.server import start
from mccl.elastic.dashboard.snapshot import Fleet
from mccl.elastic.membership import Membership
from mccl.elastic.records import Cause, Generation
from mccl.elastic.store import connect

ROOT = Path(__file__).resolve().parents[2]
SECRETISH = "c0ffee-SECRET-MATERIAL-5f3a9"
TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture
def store():
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    yield master, f"127.0.0.1:{master.port}"
    del master


def _members(address: str, job: str) -> Membership:
    m = Membership(connect(address, TIMEOUT), job)
    m.store.patience = 10.0
    return m


def _gen(m: Membership, n: int, members: list[str], cause: Cause, step: int, **kw) -> Generation:
    return m.publish(n, Generation(members=tuple(members), admitted=len(members) + n, cause=cause, step=step,
                                   incarnation="inc1", **kw))


def _fake(member_id: str, rec: Generation, gen: int, step: int, boundary_s: float = 0.004):
    import types
    return types.SimpleNamespace(
        id=member_id, generation=gen, record=rec, _pid=4242, _step_times=collections.deque([(0.25, 32)] * 20),
        boundary_s=collections.deque([boundary_s] * 5), skipped=[], _end_at=None, _last_loss=1.25,
        _status_at=0.0, step=step, steps=1000)


def _write_member(m: Membership, member_id: str, rec: Generation, gen: int, step: int, host: str,
                  boundary_s: float = 0.004) -> None:
    fake = _fake(member_id, rec, gen, step, boundary_s)
    mine = publish.member_status(fake, rec.members.index(member_id), host=host)
    m.set(f"status/m/{member_id}", keys.dumps(mine))
    if mine["rank"] == 0:
        m.set("status/job", keys.dumps(publish.job_status(fake, mine)))


def _agent(raw, host: str, state: str, reason: str, job: str = "vit", pid=None, age_s: float = 0.0) -> None:
    raw.set(keys.agent_key(host), json.dumps({"host": host, "state": state, "reason": reason, "since": time.time() - 60,
                                              "job": job, "pid": pid, "time": time.time() - age_s}))
    raw.append(keys.AGENTS_KEY, host + "\n")


def _night(address: str, raw) -> Membership:
    """Job vit: 4 founders, one joins, one leaves, one crashes (history lines
    with times and stalls); three machines without a worker."""
    m = _members(address, "vit")
    m.create("inc1")
    m.list_job()
    ids = [f"mac-{i}:{100 + i}:abc{i}" for i in range(5)]
    rec = _gen(m, 0, ids[:4], Cause.START, 0)
    history = [{"generation": 0, "cause": "start", "world": 4, "joined": ids[:4], "left": [], "stall_s": 2.0,
                "step": 0, "time": time.time() - 300}]
    rec = _gen(m, 1, ids, Cause.JOIN, 40)
    history.append({"generation": 1, "cause": "join", "world": 5, "joined": [ids[4]], "left": [], "stall_s": 1.5,
                    "step": 40, "time": time.time() - 200})
    rec = _gen(m, 2, [i for i in ids if i != ids[1]], Cause.LEAVE, 80)
    history.append({"generation": 2, "cause": "leave", "world": 4, "joined": [], "left": [ids[1]], "stall_s": 0.25,
                    "step": 80, "time": time.time() - 100})
    rec = _gen(m, 3, [i for i in ids if i not in (ids[1], ids[2])], Cause.CRASH, 120)
    history.append({"generation": 3, "cause": "crash", "world": 3, "joined": [], "left": [ids[2]], "stall_s": 3.5,
                    "step": 120, "time": time.time() - 50, "secret": SECRETISH})
    m.store.append(m.key("history"), "".join(json.dumps(h) + "\n" for h in history))
    m.store.add(m.key("joinseq"), rec.admitted + 1)  # one joiner waits
    for mid in rec.members:
        # mac-4 waits least at the boundary: the others wait for it.
        _write_member(m, mid, rec, 3, 130, mid.split(":")[0], boundary_s=0.0005 if mid.startswith("mac-4") else 0.02)
    for mid in rec.members:
        _agent(raw, mid.split(":")[0], "training", "idle 40.0 min, in the window, on AC", pid=int(mid.split(":")[1]))
    _agent(raw, "mac-1", "ineligible", "input seen (idle 2 s, was 900 s): the person is back")
    _agent(raw, "mac-7", "training", "idle 20.0 min, in the window", pid=777)   # runs, not admitted
    _agent(raw, "mac-8", "idle", "idle 30.0 min; the worker starts again at 23:10:00", age_s=120)  # asleep since
    _agent(raw, "mac-9", "error", "cannot read activity (ioreg output has no HIDIdleTime)")
    # What must never be served: a process group's bootstrap record, and fields nobody asked for.
    raw.set("mccl-elastic/vit/pg/3//0//cpu//mccl/v1/bootstrap", SECRETISH)
    k = "mccl-elastic/vit/status/m/mac-0:100:abc0"
    raw.set(k, json.dumps(json.loads(raw.get(k).decode()) | {"secret": SECRETISH}))
    return m


def test_snapshot_tells_jobs_members_changes_and_machines(store):
    raw, address = store
    _night(address, raw)
    snap = Fleet(StoreReader.tcp("127.0.0.1", raw.port)).read()
    (job,) = snap["jobs"]
    assert (job["name"], job["state"], job["generation"], job["cause"], job["world"]) == ("vit", "running", 3,
                                                                                         "crash", 3)
    assert job["step"] == 130 and job["target"] == 1000 and job["waiting"] == 1
    assert job["eta_s"] == pytest.approx((1000 - 130) * 0.25, rel=0.01)
    assert job["samples_per_s"] == pytest.approx(128 * 3) and job["loss"] == 1.25
    assert [c["cause"] for c in job["changes"]] == ["start", "join", "leave", "crash"]
    assert [c["stall_s"] for c in job["changes"]] == [2.0, 1.5, 0.25, 3.5]
    assert job["changes"][2]["left"] == ["mac-1:101:abc1"] and job["changes"][1]["joined_n"] == 1
    assert job["changes_by_cause"] == {"start": 1, "join": 1, "leave": 1, "crash": 1}
    assert job["stall_s_total"] == pytest.approx(7.25)
    assert [r["host"] for r in job["members"]] == ["mac-0", "mac-3", "mac-4"]
    assert job["slowest"][0]["host"] == "mac-4" and job["slowest"][0]["lag_s"] > 0.01
    shown = {a["host"]: a["shown"] for a in snap["agents"]}
    assert shown == {"mac-0": "training", "mac-3": "training", "mac-4": "training", "mac-1": "ineligible",
                     "mac-7": "waiting", "mac-8": "away", "mac-9": "error"}
    assert snap["counts"] == {"training": 3, "ineligible": 1, "waiting": 1, "away": 1, "error": 1}
    assert SECRETISH not in json.dumps(snap) and "mccl/v1" not in json.dumps(snap)


def test_without_a_history_the_records_tell_the_changes(store):
    raw, address = store
    m = _members(address, "old")
    m.list_job()
    ids = ["a:1:x", "b:2:x", "c:3:x"]
    _gen(m, 0, ids[:2], Cause.START, 0)
    _gen(m, 1, ids, Cause.JOIN, 10)
    fleet = Fleet(StoreReader.tcp("127.0.0.1", raw.port))
    job = fleet.read()["jobs"][0]
    assert [(c["generation"], c["cause"], c["world"], c["joined"]) for c in job["changes"]] == \
        [(0, "start", 2, ids[:2]), (1, "join", 3, ["c:3:x"])]
    assert all(c["time"] is None and c["stall_s"] is None for c in job["changes"])  # there before we looked
    _gen(m, 2, ids[1:], Cause.CRASH, 20)
    job = fleet.read()["jobs"][0]
    last = job["changes"][-1]
    assert (last["cause"], last["left"], last["seen"]) == ("crash", ["a:1:x"], True)
    assert abs(last["time"] - time.time()) < 5  # when the coordinator saw it
    # A dormant job: nobody trains, its state is in the checkpoint.
    _gen(m, 3, [], Cause.DORMANT, 20, checkpoint="/Volumes/ckpt/old/step-20")
    job = fleet.read()["jobs"][0]
    assert (job["state"], job["world"], job["members"], job["checkpoint"]) == \
        ("dormant", 0, [], "/Volumes/ckpt/old/step-20")


def test_the_reader_reads_many_keys_in_few_round_trips(store):
    raw, _ = store
    for i in range(200):
        raw.set(f"k/{i}", str(i))
    r = StoreReader.tcp("127.0.0.1", raw.port)
    want = [f"k/{i}" for i in range(200)] + ["k/missing"]
    got = r.many(want)
    assert got["k/missing"] is None and all(got[f"k/{i}"] == str(i).encode() for i in range(200))
    assert r.round_trips <= 20, r.round_trips


def test_series_keeps_a_bounded_night_and_downsamples():
    s = Series(every_s=10.0, keep_s=3600.0)
    for t in range(0, 7200, 5):  # every 5 s for two hours: one in two kept, the last hour only
        s.offer(float(t), 100.0 + (t % 20), 4 if t < 6000 else 3, t // 5, None)
    assert len(s.ring) == 360
    pts = s.points(limit=60)
    assert len(pts) <= 61 and pts[0][0] >= 3600 - 10 and pts[-1][0] == 7190.0
    assert min(p[2] for p in pts) == 3 and max(p[2] for p in pts) == 4


def _get(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture
def page(store):
    raw, address = store
    _night(address, raw)
    srv = start("127.0.0.1", raw.port, "127.0.0.1", 0, every_s=1.0, env={})
    yield raw, address, f"http://127.0.0.1:{srv.port}", srv
    srv.close()


def _metrics(text: str) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_api_metrics_and_page_agree_and_serve_nothing_secret(page):
    raw, _, url, _ = page
    code, head, body = _get(url + "/api/fleet")
    assert code == 200 and head["Content-Type"] == "application/json"
    api = json.loads(body)
    code, head, text = _get(url + "/metrics")
    assert code == 200 and head["Content-Type"].startswith("text/plain; version=0.0.4")
    m = _metrics(text.decode())
    job = api["jobs"][0]
    assert m[("mccl_job_members", (("job", "vit"),))] == job["world"] == 3
    assert m[("mccl_job_generation", (("job", "vit"),))] == 3
    assert m[("mccl_job_step", (("job", "vit"),))] == job["step"]
    assert m[("mccl_job_waiting_joiners", (("job", "vit"),))] == 1
    assert m[("mccl_job_state", (("job", "vit"), ("state", "running")))] == 1.0
    assert m[("mccl_job_state", (("job", "vit"), ("state", "dormant")))] == 0.0
    for cause, n in job["changes_by_cause"].items():
        assert m[("mccl_job_changes_total", (("cause", cause), ("job", "vit")))] == n
    for state, n in api["counts"].items():
        assert m[("mccl_agents", (("state", state),))] == n
    assert m[("mccl_member_step_seconds", (("host", "mac-4"), ("job", "vit"), ("member", "mac-4:104:abc4"),
                                           ("rank", "2")))] == 0.25
    assert m[("mccl_coordinator_store_up", ())] == 1.0
    # The page and its assets come from the package; nothing from elsewhere.
    code, head, html = _get(url + "/")
    assert code == 200 and b"/static/app.js" in html and "script-src 'self'" in head["Content-Security-Policy"]
    for asset in ("app.js", "style.css", "favicon.svg"):
        code, _, data = _get(url + "/static/" + asset)
        assert code == 200 and data
        assert not re.search(rb"https?://(?!www\.w3\.org/2000/svg)", data), asset  # no CDN, no web font
    # Nothing secret anywhere: not the bootstrap record, not a field a writer slipped in.
    everything = body + text + html
    assert SECRETISH.encode() not in everything and b"mccl/v1" not in everything
    assert _get(url + "/healthz")[2] == b"ok\n"


def test_docs_list_every_metric_and_the_dashboard_uses_them(page):
    _, _, url, _ = page
    names = {re.sub(r"_total$", "", n) for n, _ in _metrics(_get(url + "/metrics")[2].decode())}
    doc = (ROOT / "docs" / "status-page.md").read_text()
    documented = set(re.findall(r"^\| `(mccl_[a-z_]+)`", doc, re.M))
    assert names <= {re.sub(r"_total$", "", n) for n in documented}, names - documented
    grafana = json.loads((ROOT / "docs" / "grafana" / "mccl-fleet.json").read_text())
    used = set(re.findall(r"mccl_[a-z_]+", json.dumps(grafana)))
    # Against the documented set, not this scrape: a family with no value yet
    # (a loss before the first step) is left out of a scrape.
    assert used and {re.sub(r"_total$", "", n) for n in used} <= {re.sub(r"_total$", "", n) for n in documented}, used


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from mccl.cli import main
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_job_secret_makes_the_page_ask_for_the_token(store, tmp_path, capsys, monkeypatch):
    raw, address = store
    _night(address, raw)
    secret = tmp_path / "job.secret"
    assert _cli(capsys, "secret", str(secret))[0] == 0
    code, token, _ = _cli(capsys, "secret", "--token", str(secret))
    token = token.strip()
    monkeypatch.setenv("MCCL_SECRET_FILE", str(secret))
    by_env = _cli(capsys, "secret", "--token")[1].strip()
    monkeypatch.delenv("MCCL_SECRET_FILE")
    assert code == 0 and re.fullmatch(r"[0-9a-f]{64}", token) and by_env == token
    assert token not in secret.read_text()
    srv = start("127.0.0.1", raw.port, "127.0.0.1", 0, env={"MCCL_SECRET_FILE": str(secret)})
    url = f"http://127.0.0.1:{srv.port}"
    try:
        for path in ("/", "/api/fleet", "/metrics"):
            code, head, body = _get(url + path)
            assert code == 401 and "Bearer" in head["WWW-Authenticate"] and b"vit" not in body, path
            assert _get(url + path, {"Authorization": "Bearer " + "0" * 64})[0] == 401
            assert _get(url + path, {"Authorization": "Bearer " + token})[0] == 200
        code, head, _ = _get(url + "/", {"Accept": "text/html"})
        assert code == 401  # the login page
        code, head, _ = _get(url + f"/api/fleet?token={token}")
        assert code == 303 and head["Location"] == "/api/fleet" and "HttpOnly" in head["Set-Cookie"]
        cookie = head["Set-Cookie"].split(";")[0]
        assert _get(url + "/api/fleet", {"Cookie": cookie})[0] == 200
        assert _get(url + "/api/fleet?token=nope")[0] == 401
        assert _get(url + "/healthz")[0] == 200 and _get(url + "/static/app.js")[0] == 200  # no fleet data in them
        # The status command finds the token from the job secret in its environment.
        code, out, err = _cli(capsys, "elastic", "status", "--http", url)
        assert code == 1 and "401" in err
        monkeypatch.setenv("MCCL_SECRET_FILE", str(secret))
        code, out, err = _cli(capsys, "elastic", "status", "--http", url)
        assert code == 0 and "job 'vit': running" in out, err
    finally:
        srv.close()
    secret.chmod(0o644)  # a secret others can read: refused, as MCCL refuses it
    with pytest.raises(ValueError, match="chmod 600"):
        start("127.0.0.1", raw.port, "127.0.0.1", 0, env={"MCCL_SECRET_FILE": str(secret)})


def test_status_prints_the_fleet_from_the_page_and_from_the_store(page, capsys):
    _, address, url, _ = page
    for args in (["--http", url], ["--store", address, "--fleet"]):
        code, text, err = _cli(capsys, "elastic", "status", *args)
        assert code == 0, err
        assert "job 'vit': running, generation 3 (crash), 3 members, step 130/1000" in text, text
        assert "1 crash, 1 join, 1 leave, 1 start" in text and "slow: rank 2 mac-4" in text
        assert re.search(r"mac-1\s+ineligible\s+input seen", text) and re.search(r"mac-8\s+away", text)
    assert json.loads(_cli(capsys, "elastic", "status", "--http", url, "--json")[1])["jobs"][0]["name"] == "vit"
    # The per-job output is as it was.
    code, out, _ = _cli(capsys, "elastic", "status", "--store", address, "--job", "vit")
    assert code == 0 and "job 'vit': running, generation 3 (crash), 3 members" in out


def test_a_member_publishes_small_values_rate_limited_and_never_while_the_store_is_away(store):
    from mccl.elastic.job import Job
    raw, address = store
    m = _members(address, "vit")
    m.store.patience = 0.0
    ids = [f"mac-{i:03d}.studio.example:{10000 + i}:{i:06x}" for i in range(200)]
    rec = Generation(members=tuple(ids), admitted=200, cause=Cause.START)
    for rank in (0, 199):
        fake = _fake(ids[rank], rec, 0, 123_456_789)
        fake._last_loss = 1.2345678901234
        Job._publish_status(fake, m, 0)
        value = raw.get(f"mccl-elastic/vit/status/m/{ids[rank]}")
        assert len(value) < keys.VALUE_MAX and json.loads(value)["rank"] == rank
    assert len(raw.get("mccl-elastic/vit/status/job")) < keys.VALUE_MAX
    # At most every 2 s: a second call right after writes nothing.
    raw.delete_key(f"mccl-elastic/vit/status/m/{ids[0]}")
    Job._publish_status(fake := _fake(ids[0], rec, 0, 5), m, 1)
    first = fake._status_at
    Job._publish_status(fake, m, 2)
    assert fake._status_at == first and first - time.monotonic() <= publish.STATUS_EVERY_S
    # The store away: the member skips it without a call (the watcher finds it back).
    fake._status_at = 0.0
    m.store.health.away_since = time.monotonic()
    t0 = time.perf_counter()
    Job._publish_status(fake, m, 3)
    assert fake._status_at == 0.0 and time.perf_counter() - t0 < 0.01


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_agent_publisher_never_blocks_and_drops_what_it_cannot_write(store):
    raw, address = store
    p = publish.AgentPublisher(f"127.0.0.1:{_dead_port()}", host="mac-x", job="vit", every_s=0.2)
    t0 = time.perf_counter()
    for i in range(100):
        p.offer("idle" if i % 2 else "training", "why", None)
    assert time.perf_counter() - t0 < 0.05
    deadline = time.monotonic() + 10
    while p.dropped == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.dropped > 0 and p.written == 0
    p.close(2.0)
    q = publish.AgentPublisher(address, host="mac-y", job="vit", every_s=0.5)
    q.offer("training", "idle 20.0 min, in the window", 4321)
    deadline = time.monotonic() + 10
    while q.written == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    value = json.loads(raw.get(keys.agent_key("mac-y")))
    assert {k: value[k] for k in ("host", "state", "job", "pid")} == {"host": "mac-y", "state": "training",
                                                                      "job": "vit", "pid": 4321}
    assert raw.get(keys.AGENTS_KEY).decode().split("\n").count("mac-y") == 1
    q.offer("stopping", "input seen", 4321)
    deadline = time.monotonic() + 2
    while json.loads(raw.get(keys.agent_key("mac-y")))["state"] != "stopping" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert json.loads(raw.get(keys.agent_key("mac-y")))["state"] == "stopping"  # a change: at once
    q.close(2.0)
    assert raw.get(keys.AGENTS_KEY).decode().split("\n").count("mac-y") == 1


def test_the_agent_says_what_it_does(store, tmp_path):
    from mccl.agent import Agent, parse
    from mccl.agent.activity import FileSource
    raw, address = store
    idle = tmp_path / "idle"
    idle.write_text("3600 ac\n")
    cfg = parse(f"""
[rules]
idle_minutes = 1
[worker]
command = ["{sys.executable}", "-c", "import time; time.sleep(60)"]
leave_deadline_s = 2
[fleet]
store = "{address}"
job = "vit"
host = "mac-a"
publish_every_s = 1
""")
    agent = Agent(cfg, FileSource(str(idle)))

    def state():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if raw.check([keys.agent_key("mac-a")]):
                v = json.loads(raw.get(keys.agent_key("mac-a")))
                if v["state"] == want:
                    return v
            time.sleep(0.05)
        raise AssertionError(f"no {want!r} from the agent: {raw.get(keys.agent_key('mac-a'))!r}")
    try:
        agent.tick()
        want = "training"
        v = state()
        assert v["pid"] == agent.proc.pid and v["job"] == "vit"
        idle.write_text("5 ac\n")  # the person is back
        agent.tick()
        want = "ineligible"
        assert "the person is back" in state()["reason"] or "idle" in state()["reason"]
        idle.write_text("garbage\n")
        agent.tick()
        want = "error"
        assert "cannot read activity" in state()["reason"]
    finally:
        agent.stop("test over")
        agent.publisher.close(2.0)


@pytest.mark.parametrize("text,error", [
    ('[fleet]\nstore = "nohost"', "fleet.store"),
    ('[fleet]\nstore = "h:1"\nhost = "a b"', "fleet.host"),
    ('[fleet]\npublish_every_s = 0', "publish_every_s"),
    ('[fleet]\nbogus = 1', "unknown key fleet.bogus"),
])
def test_the_fleet_section_is_checked(text, error):
    from mccl.agent import parse
    with pytest.raises(ValueError, match=error):
        parse('[worker]\ncommand = ["x"]\n' + text)


@pytest.mark.slow
def test_serve_runs_the_store_when_the_page_cannot_be_served(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    proc = subprocess.Popen([sys.executable, "-m", "mccl.cli", "elastic", "serve", "--host", "127.0.0.1", "--port",
                             "0", "--http-port", str(busy.getsockname()[1])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("not served" in x for x in lines):
            lines.append(proc.stdout.readline())
        assert any("store listening" in x for x in lines) and any("not served" in x for x in lines), lines
        assert proc.poll() is None  # the store goes on
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        busy.close()


@pytest.mark.slow
def test_the_status_load_bench_runs_and_reports(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mccl.bench", "status-load", "--members", "6", "--agents", "8",
                          "--seconds", "3", "--settle-s", "1", "--loads", "2", "--no-browser", "--change-s", "2",
                          "--json", str(tmp_path / "load.json")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    r = json.loads((tmp_path / "load.json").read_text())
    assert r["agents_seen"] == 8 and sum(r["jobs_seen"].values()) >= 4
    assert 0 <= r["coordinator_cpu_percent"] < 50 and r["member_cost"]["member_value_bytes"] < keys.VALUE_MAX
    assert "coordinator CPU" in out.stdout and "member side" in out.stdout


def test_wire_rate_is_bytes_per_second_between_two_statuses():
    counts = iter([(1000, 500), (1000 + 3_000_000, 500 + 1_500_000), (1000 + 3_000_000, 500 + 1_500_000)])
    rate = publish.WireRate(read=lambda: next(counts))
    assert rate(now=10.0) == (None, None)            # the first status has nothing to compare with
    assert rate(now=12.0) == (1_500_000.0, 750_000.0)
    assert rate(now=12.0) == (None, None)            # no time passed: no rate
    # A member's status carries them, and the snapshot passes them on.
    fake = _fake("mac-0:1:a", Generation(members=("mac-0:1:a",), admitted=1, cause=Cause.START, step=0,
                                         incarnation="i"), 0, 5)
    fake._wire_rate = publish.WireRate(read=iter([(0, 0), (4000, 2000)]).__next__)
    assert publish.member_status(fake, 0)["wire_sent_Bps"] is None
    fake._wire_rate._last = (time.monotonic() - 2.0, 0, 0)
    mine = publish.member_status(fake, 0)
    assert mine["wire_sent_Bps"] == pytest.approx(2000, rel=0.05)
    assert mine["wire_received_Bps"] == pytest.approx(1000, rel=0.05)
