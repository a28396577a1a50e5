"""EtcdStore (mccl.elastic.etcd) on a real 3-node etcd cluster: the same
operations as TCPStore with the same results, atomic ops under concurrency,
a leader killed under a writer, and process groups (gloo, mccl) whose
rendezvous is the cluster. Run with -s to see latencies and failover times."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
import torch.distributed as dist

from conftest import run_workers
from etcd_cluster import etcd_cluster  # noqa: F401  (the fixture)
from mccl.elastic.etcd import EtcdStore, _Retry, connect_url, leader_probe, parse_url


def _store(cluster, timeout: float = 10.0, **kw) -> EtcdStore:
    return EtcdStore(cluster.endpoints, prefix=f"/test/{uuid.uuid4().hex[:8]}/", timeout=timeout, **kw)


def _table(s) -> list:
    """Every c10d store op, edge cases included; results (or exception
    types) in order. Runs on a fresh store with a 0.3 s timeout."""
    p = dist.PrefixStore("pre/", s)  # the C++ side calling back into Python
    ops = [
        lambda: s.num_keys(),
        lambda: s.set("a", "1"), lambda: s.get("a"),
        lambda: s.set("b", b"\x00\xffbin"), lambda: s.get("b"),
        lambda: s.add("c", 5), lambda: s.add("c", -2), lambda: s.add("c", 0), lambda: s.get("c"),
        lambda: s.add("fresh", 0), lambda: s.get("fresh"),
        lambda: s.compare_set("x", "foo", "bar"), lambda: s.check(["x"]),  # absent, expected non-empty
        lambda: s.compare_set("x", "", "bar"),  # absent, expected empty: set
        lambda: s.compare_set("x", "zzz", "baz"),  # mismatch
        lambda: s.compare_set("x", "bar", "baz"),  # match
        lambda: s.compare_set("x", "", "q"),  # present, expected empty: mismatch
        lambda: s.compare_set("x", "baz", "baz"), lambda: s.get("x"),
        lambda: s.set("e", ""), lambda: s.compare_set("e", "", "w"),  # empty value equals expected
        lambda: s.append("ap", "x"), lambda: s.append("ap", b"yz"), lambda: s.get("ap"),
        lambda: s.delete_key("ap"), lambda: s.delete_key("ap"), lambda: s.check(["ap"]),
        lambda: s.check([]), lambda: s.check(["a", "c"]), lambda: s.check(["a", "nope"]),
        lambda: s.multi_set(["m1", "m2"], ["v1", b"v2"]), lambda: s.multi_get(["m1", "m2"]),
        lambda: s.wait(["a", "m1"]), lambda: s.wait(["a"], timedelta(seconds=1)),
        lambda: s.get("missing"), lambda: s.wait(["missing"], timedelta(milliseconds=200)),
        lambda: s.multi_get(["a", "missing"]),
        lambda: sorted(s.list_keys()), lambda: s.num_keys(), lambda: s.has_extended_api(),
        lambda: s.timeout,
        lambda: p.set("k", "v"), lambda: p.get("k"), lambda: p.add("n", 3), lambda: p.add("n", 4),
        lambda: p.compare_set("k", "v", "w"), lambda: p.compare_set("k", "v", "z"),
        lambda: p.append("k", "!"), lambda: p.get("k"), lambda: p.multi_get(["k", "n"]),
        lambda: p.check(["k", "n"]), lambda: p.wait(["k"]), lambda: p.get("missing"),
        lambda: p.delete_key("n"), lambda: p.delete_key("n"), lambda: p.num_keys(),
    ]
    out = []
    for op in ops:
        try:
            out.append(op())
        except Exception as e:  # noqa: BLE001 - the type is the result
            out.append(type(e).__name__)
    return out


def test_same_results_as_tcpstore(etcd_cluster):
    tcp = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=0.3), wait_for_workers=False)
    etcd = _store(etcd_cluster, timeout=0.3)
    want, got = _table(tcp), _table(etcd)
    assert "DistStoreError" in want
    for i, (w, g) in enumerate(zip(want, got)):
        assert w == g, f"op {i}: TCPStore gave {w!r}, EtcdStore {g!r}\nTCPStore: {want}\nEtcdStore: {got}"
    assert len(want) == len(got)
    etcd.close()


def test_latency_per_op(etcd_cluster):
    s = _store(etcd_cluster)
    s.set("k", "v")
    n = 50
    figures = {}
    for name, op in [("set", lambda i: s.set("k", str(i))), ("get", lambda i: s.get("k")),
                     ("check", lambda i: s.check(["k"])), ("add", lambda i: s.add("n", 1)),
                     ("compare_set", lambda i: s.compare_set("k", str(i - 1) if i else "v", str(i)))]:
        if name == "compare_set":
            s.set("k", "v")
        t = time.perf_counter()
        for i in range(n):
            op(i)
        figures[name] = (time.perf_counter() - t) / n * 1e3
    assert s.add("n", 0) == n
    assert s.get("k") == str(n - 1).encode()  # every compare_set matched
    print("\nEtcdStore latency per call on loopback (ms): "
          + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    s.close()


def test_concurrent_adds_and_compare_set_race(etcd_cluster):
    base = _store(etcd_cluster)
    stores = [base.clone() for _ in range(4)]
    errors: list[BaseException] = []

    def adder(st):
        try:
            for _ in range(200):
                st.add("ctr", 1)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=adder, args=(st,)) for st in stores]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert base.add("ctr", 0) == 800
    print(f"\n800 contended adds from 4 clients: {time.perf_counter() - t:.2f} s")

    # compare_set: one winner, and everyone sees the winner's value.
    got: list[bytes] = [b""] * 4
    barrier = threading.Barrier(4)

    def racer(i, st):
        barrier.wait()
        got[i] = st.compare_set("race", "", f"w{i}")

    threads = [threading.Thread(target=racer, args=(i, st)) for i, st in enumerate(stores)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert len(set(got)) == 1 and got[0] in {f"w{i}".encode() for i in range(4)}, got
    assert sum(g == f"w{i}".encode() for i, g in enumerate(got)) == 1
    for st in [base, *stores]:
        st.close()


def test_clone_is_independent_and_outlives_python_references(etcd_cluster):
    s = _store(etcd_cluster)
    c = s.clone()
    assert isinstance(c, EtcdStore) and c is not s and c.prefix == s.prefix
    assert c.timeout == s.timeout
    c.set("from-clone", "1")
    assert s.get("from-clone") == b"1"
    # Held only by c10d: a PrefixStore over a temporary, and its C++ clone.
    p = dist.PrefixStore("p/", _store(etcd_cluster))
    p.set("k", "v")
    pc = p.clone()
    assert pc.get("k") == b"v" and p.num_keys() == 1 and p.delete_key("k")
    s.close()
    c.close()


def test_a_lost_answer_applies_once(etcd_cluster):
    """The txn reaches etcd and applies, its answer is lost, the client
    sends it again elsewhere: the receipt makes each op count once."""
    s = _store(etcd_cluster)
    real, lose = s._post, []

    def post(i, path, data, limit, may_resend=True):
        answer = real(i, path, data, limit, may_resend)
        if path == "/v3/kv/txn" and lose:
            lose.pop()
            raise _Retry("answer lost (test)")
        return answer

    s._post = post
    s.set("n", "10")
    lose.append(1)
    assert s.add("n", 5) == 15 and s.get("n") == b"15"
    lose.append(1)
    assert s.compare_set("k", "", "v") == b"v" and s.get("k") == b"v"
    lose.append(1)
    s.append("a", "x")
    assert s.get("a") == b"x"
    s.set("d", "1")
    lose.append(1)
    assert s.delete_key("d") is True and not s.check(["d"])
    assert not lose
    s.close()


@pytest.mark.parametrize("writer_on", ["leader", "follower"])
def test_failover_when_the_leader_dies(etcd_cluster, writer_on):
    leader = etcd_cluster.wait_leader()
    others = [i for i in range(3) if i != leader]
    order = [leader, *others] if writer_on == "leader" else [others[0], leader, others[1]]
    s = EtcdStore([etcd_cluster.endpoints[i] for i in order], prefix=f"/test/{uuid.uuid4().hex[:8]}/",
                  timeout=30)
    log: list[tuple[str, float, float]] = []  # (op, start, end), successful ops only
    errors: list[BaseException] = []
    stop = threading.Event()
    adds = 0

    def writer():
        nonlocal adds
        i = 0
        try:
            while not stop.is_set():
                t = time.monotonic()
                s.add("ctr", 1)
                adds += 1
                log.append(("add", t, time.monotonic()))
                t = time.monotonic()
                s.set(f"k{i}", str(i))
                log.append(("set", t, time.monotonic()))
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=writer)
    th.start()
    while len(log) < 20 and th.is_alive():
        time.sleep(0.01)
    killed = time.monotonic()
    etcd_cluster.kill(leader)
    while th.is_alive() and sum(start > killed for _, start, _ in log[-20:]) < 20 \
            and time.monotonic() - killed < 25:
        time.sleep(0.01)
    stop.set()
    th.join(40)
    assert not th.is_alive(), "the writer is stuck"
    assert not errors, f"an op failed during failover: {errors[0]!r}"
    first = min(end for _, start, end in log if start >= killed)
    stall = max(end - start for _, start, end in log)
    print(f"\nleader killed under a writer on the {writer_on}: the first op started after the kill "
          f"completed {first - killed:.2f} s after it; longest op {stall:.2f} s; {adds} adds")
    assert first - killed < 15
    # Exactly once: every successful add counted once (receipts), every set kept.
    assert s.add("ctr", 0) == adds
    n_sets = sum(op == "set" for op, _, _ in log)
    assert s.multi_get([f"k{i}" for i in range(n_sets)]) == [str(i).encode() for i in range(n_sets)]
    s.close()
    # Back to three nodes for the tests that follow.
    etcd_cluster.start(leader)
    end = time.monotonic() + 20
    while etcd_cluster.status(leader) is None and time.monotonic() < end:
        time.sleep(0.05)
    etcd_cluster.wait_leader()


class _FakeNode:
    """An etcd gateway stand-in: puts are answered (or held forever, as a
    follower holds a write it forwarded to a leader that died), and its
    status reports a Raft term and a leader the test sets."""

    def __init__(self):
        import http.server
        import json
        node = self
        self.term, self.leader, self.hold, self.puts, self.status = 2, 7, 0, 0, "ok"
        self.hold_s = 30.0  # how long a held put waits before it is answered
        self.drops = 0  # puts answered "raft proposal dropped"
        self.release = threading.Event()

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v3/maintenance/status":
                    if node.status == "hang":
                        node.release.wait(30)
                        return
                    if node.status == "close":  # the connection dropped: a node that is down
                        self.close_connection = True
                        return
                    body = {"header": {"raft_term": str(node.term)}, "raftTerm": str(node.term),
                            "leader": str(node.leader)}
                else:
                    node.puts += 1
                    if node.drops:
                        node.drops -= 1
                        raw = json.dumps({"code": 2, "error": "etcdserver: raft proposal dropped"}).encode()
                        self.send_response(500)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(raw)))
                        self.end_headers()
                        self.wfile.write(raw)
                        return
                    if node.hold:
                        node.hold -= 1
                        if node.release.wait(node.hold_s) or node.hold_s >= 30:
                            return  # never answered while the test runs

                    body = {"header": {"raft_term": str(node.term)}}
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.endpoint = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_write_lost_with_its_leader_is_sent_again_once_the_term_moves():
    """A follower forwards a write to its leader, which dies: etcd answers
    it only at its own timeout. The client asks the node for its term while
    the write hangs, and sends it again there once an election has begun,
    long before its request timeout."""
    node = _FakeNode()
    s = EtcdStore([node.endpoint], timeout=60, request_timeout=30)
    try:
        s.set("a", "1")  # an answer at term 2
        node.hold = 1
        threading.Timer(0.5, lambda: setattr(node, "term", 3)).start()  # the election
        t = time.monotonic()
        s.set("b", "2")
        took = time.monotonic() - t
        assert node.puts == 3, "the held write was not sent again"
        assert 0.4 < took < 10, f"{took:.2f} s: sent again before the term moved, or only at the timeout"
        # Held while the term stays: a slow write, not a lost one. It is
        # waited for until the request timeout, then sent again.
        node.hold, before = 1, node.puts
        slow = EtcdStore([node.endpoint], timeout=30, request_timeout=0.8)
        t = time.monotonic()
        slow.set("c", "3")
        took = time.monotonic() - t
        slow.close()
        assert node.puts == before + 2 and took >= 0.8, f"sent again after {took:.2f} s with the term unchanged"
    finally:
        s.close()
        node.close()


def test_a_node_that_stops_answering_is_left_for_the_next():
    """A write unanswered on a node whose status connection drops too (it
    is down) moves on before the request timeout; one whose status request
    is merely slow is waited for (a slow write is not a lost one)."""
    dead, live = _FakeNode(), _FakeNode()
    s = EtcdStore([dead.endpoint, live.endpoint], timeout=60, request_timeout=30)
    try:
        dead.hold, dead.status = 1, "close"
        t = time.monotonic()
        s.set("a", "1")
        assert live.puts == 1 and time.monotonic() - t < 10
        assert "status request failed" in s._errors[0]
        slow = EtcdStore([live.endpoint, dead.endpoint], timeout=60, request_timeout=30)
        live.hold, live.hold_s, live.status = 1, 0.8, "hang"
        t = time.monotonic()
        slow.set("b", "2")
        assert live.puts == 2 and dead.puts == 1 and 0.8 <= time.monotonic() - t < 10  # answered where it was
        slow.close()
    finally:
        s.close()
        dead.close()
        live.close()


def test_a_node_whose_term_keeps_moving_gets_one_resend_per_call():
    """A node cut off in a minority raises its term at every election
    timeout: the client sends a request there again once, then moves on."""
    lone, ok = _FakeNode(), _FakeNode()
    s = EtcdStore([lone.endpoint, ok.endpoint], timeout=60, request_timeout=1.0)
    try:
        s.set("a", "1")  # an answer from the lone node at term 2
        lone.hold = 2

        def elections():
            for _ in range(30):
                time.sleep(0.15)
                lone.term += 1
        threading.Thread(target=elections, daemon=True).start()
        t = time.monotonic()
        s.set("b", "2")
        assert lone.puts == 3 and ok.puts == 1, (lone.puts, ok.puts)  # first, once again, then elsewhere
        assert time.monotonic() - t < 5
    finally:
        s.close()
        lone.close()
        ok.close()


def test_a_proposal_dropped_for_want_of_a_leader_is_sent_again():
    # etcd answers {"code": 2, "error": "etcdserver: raft proposal dropped"}
    # (HTTP 500) for a proposal a node made while it knew no leader: never
    # applied, so the client sends it again (code 2 is otherwise final).
    node = _FakeNode()
    node.drops = 1
    s = EtcdStore([node.endpoint], timeout=10)
    try:
        s.set("a", "1")
        assert node.puts == 2 and node.drops == 0
    finally:
        s.close()
        node.close()


def test_leader_probe():
    a, b = _FakeNode(), _FakeNode()
    try:
        eps = [parse_url(f"etcd://{a.endpoint},{b.endpoint}")[0]][0]
        a.leader = b.leader = 0
        assert leader_probe(eps)() is False
        b.leader = 5
        assert leader_probe(eps)() is True
        assert leader_probe([("127.0.0.1", 1)])() is False
    finally:
        a.close()
        b.close()


def test_process_groups_gloo_and_mccl_over_etcd(etcd_cluster):
    etcd_cluster.wait_leader()
    url = etcd_cluster.url(f"/test/pg-{uuid.uuid4().hex[:8]}")
    outs = run_workers("etcd_pg.py", 3, url, timeout=120)
    assert all("gloo ok" in o and "mccl ok" in o for o in outs)


def test_unreachable_cluster_names_every_endpoint():
    s = EtcdStore(["127.0.0.1:1", "127.0.0.1:2"], timeout=0.3)
    t = time.monotonic()
    with pytest.raises(dist.DistNetworkError, match=r"127\.0\.0\.1:1: .*127\.0\.0\.1:2: "):
        s.set("a", "b")
    assert time.monotonic() - t < 3
    s.close()


@pytest.mark.parametrize("url", [
    "etcd://", "etcd:///prefix", "etcd://host", "etcd://host:", "etcd://host:0", "etcd://host:65536",
    "etcd://host:2379,", "etcd://a:1,,b:2", "etcd://a:1/x//y", "etcd://a:1/x?y=1", "etcd://u@a:1",
    "http://a:1", "etcd+https://a:1", "a:1", "etcd://a b:1", "etcd://[::1:1",
])
def test_malformed_url_is_refused(url):
    with pytest.raises(ValueError) as e:
        connect_url(url)
    assert repr(url) in str(e.value)


def test_url_forms():
    assert parse_url("etcd://a:2379,b.lan:2380,[::1]:2381") == (
        [("a", 2379), ("b.lan", 2380), ("::1", 2381)], "/mccl/")
    assert parse_url("etcd+http://10.0.0.1:2379/jobs/vit") == ([("10.0.0.1", 2379)], "/jobs/vit/")
    assert parse_url("etcd://h:1/") == ([("h", 1)], "/mccl/")
