"""A real 3-node etcd cluster on 127.0.0.1, and the faults to inject into it
(kill the leader, restart a node): for tests (tests/python/etcd_cluster.py's
fixture) and `mccl-bench elastic --week --store etcd`.

    cluster = EtcdCluster(Path("/tmp/etcd"))
    cluster.start(); cluster.wait_leader()
    job = mccl.elastic.Job(cluster.url("/myjob/"), ...)
    cluster.kill(cluster.wait_leader())

Every node runs in its own session (so a kill takes its whole process group)
with its data under a temporary directory; the fixture kills every node at
the end, also when the test fails. Without the `etcd` binary (Debian:
`apt-get install etcd-server`, what scripts/setup.sh does) the tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ETCD = shutil.which("etcd")
# Linux (util-linux's setpriv): a node gets SIGKILL when the thread that
# started it dies, even by SIGKILL (when no fixture teardown runs).
SETPRIV = shutil.which("setpriv")
DIE_WITH_PARENT = [SETPRIV, "--pdeathsig", "KILL", "--"] if SETPRIV else []


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class EtcdCluster:
    """``n`` etcd members; elections take about 1-2 s (heartbeat 100 ms,
    election timeout 1000 ms). By default every node runs here on
    127.0.0.1; with `hosts` (one address each) and `prefix` (the command
    that runs a program on host i, e.g. a network lab's ``ip netns exec``)
    node i runs on host i, on etcd's usual ports."""

    def __init__(self, base: Path, n: int = 3, heartbeat_ms: int = 100, election_ms: int = 1000,
                 hosts: list[str] | None = None, prefix=None):
        if ETCD is None:
            raise RuntimeError("etcd_cluster: no `etcd` binary on PATH (apt-get install etcd-server)")
        if hosts is not None and len(hosts) != n:
            raise ValueError(f"etcd_cluster: {n} nodes need {n} hosts, got {hosts}")
        self.base = Path(base)
        self.hosts = list(hosts) if hosts is not None else ["127.0.0.1"] * n
        self.prefix = prefix or (lambda i: [])
        if hosts is None:
            ports = _free_ports(2 * n)
            self.client_ports, self.peer_ports = ports[:n], ports[n:]
        else:
            self.client_ports, self.peer_ports = [2379] * n, [2380] * n
        self.names = [f"n{i}" for i in range(n)]
        self.timing = [f"--heartbeat-interval={heartbeat_ms}", f"--election-timeout={election_ms}"]
        self.token = f"mccl-test-{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen | None] = [None] * n

    @property
    def endpoints(self) -> list[str]:
        return [f"{h}:{p}" for h, p in zip(self.hosts, self.client_ports)]

    def url(self, prefix: str = "") -> str:
        return "etcd://" + ",".join(self.endpoints) + prefix

    def _argv(self, i: int) -> list[str]:
        c, p = f"http://{self.hosts[i]}:{self.client_ports[i]}", f"http://{self.hosts[i]}:{self.peer_ports[i]}"
        cluster = ",".join(f"{nm}=http://{h}:{pp}" for nm, h, pp in zip(self.names, self.hosts, self.peer_ports))
        return [ETCD, f"--name={self.names[i]}", f"--data-dir={self.base / self.names[i]}",
                f"--listen-client-urls={c}", f"--advertise-client-urls={c}",
                f"--listen-peer-urls={p}", f"--initial-advertise-peer-urls={p}",
                f"--initial-cluster={cluster}", "--initial-cluster-state=new",
                f"--initial-cluster-token={self.token}", *self.timing, "--log-level=warn"]

    def start(self, i: int | None = None) -> None:
        """Starts node ``i`` (every node when None); a restarted node keeps
        its data directory and rejoins as the member it was."""
        for j in (range(len(self.names)) if i is None else [i]):
            assert self.procs[j] is None or self.procs[j].poll() is not None, f"node {j} is running"
            log = open(self.base / f"{self.names[j]}.log", "ab")
            self.procs[j] = subprocess.Popen(self.prefix(j) + DIE_WITH_PARENT + self._argv(j), stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()

    def kill(self, i: int) -> None:
        """SIGKILL for node ``i`` (its whole session), reaped."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)

    def stop(self) -> None:
        for i in range(len(self.names)):
            self.kill(i)

    def status(self, i: int, timeout: float = 0.5) -> dict | None:
        """Node ``i``'s /v3/maintenance/status, or None when it does not answer
        (asked from host i itself when the nodes run under a prefix)."""
        url = f"http://{self.endpoints[i]}/v3/maintenance/status"
        if self.prefix(i):
            code = ("import sys, urllib.request\n"
                    "r = urllib.request.Request(sys.argv[1], data=b'{}', headers={'Content-Type': 'application/json'})\n"
                    "print(urllib.request.urlopen(r, timeout=float(sys.argv[2])).read().decode())\n")
            try:
                out = subprocess.run(self.prefix(i) + [sys.executable, "-c", code, url, str(timeout)],
                                     capture_output=True, text=True, timeout=timeout + 10)
                return json.loads(out.stdout) if out.returncode == 0 else None
            except (OSError, ValueError, subprocess.TimeoutExpired):
                return None
        req = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def leader(self) -> int | None:
        """The node that says it leads (its member id is the leader id it reports)."""
        for i in range(len(self.names)):
            if self.procs[i] is None or self.procs[i].poll() is not None:
                continue
            st = self.status(i)
            if st and st.get("leader") and st["leader"] == st.get("header", {}).get("member_id"):
                return i
        return None

    def wait_leader(self, timeout: float = 20.0) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None and p.returncode not in (-9,):
                    raise RuntimeError(f"etcd node {i} exited with {p.returncode}: {self.log_tail(i)}")
            lead = self.leader()
            if lead is not None:
                return lead
            time.sleep(0.05)
        raise TimeoutError(f"etcd cluster {self.endpoints} elected no leader within {timeout} s; "
                           f"logs: {[self.log_tail(i) for i in range(len(self.names))]}")

    def log_tail(self, i: int, n: int = 1500) -> str:
        try:
            return (self.base / f"{self.names[i]}.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""




_POLL = """import json, sys, time, urllib.request
old, urls = sys.argv[1], sys.argv[2:]
print("ready", flush=True)
end = time.time() + 120
while time.time() < end:
    for u in urls:
        try:
            r = urllib.request.Request(u, data=b"{}", headers={"Content-Type": "application/json"})
            st = json.loads(urllib.request.urlopen(r, timeout=0.2).read())
            me, lead = str(st["header"]["member_id"]), str(st.get("leader", "0"))
            if lead == me and lead != old:
                print(repr(time.time()), flush=True)
                sys.exit(0)
        except Exception:
            pass
    time.sleep(0.01)
print("none", flush=True)
"""


class ElectionClock:
    """Times an election to about 10 ms: a poller, started before the
    leader dies (next to a node that survives, in its network namespace on
    a lab), asks every other node for its status every 10 ms and notes the
    wall time at which one says it leads. (Polling through a new process per
    request, as status() does on a lab, costs a process start per look.)

        clock = ElectionClock(cluster, leader)
        cluster.kill(leader); killed = time.time()
        seconds = clock.seconds(killed)
    """

    def __init__(self, cluster: "EtcdCluster", old: int, timeout: float = 30.0):
        st = cluster.status(old)
        if not st:
            raise RuntimeError(f"etcd node {old} does not answer: cannot time its loss")
        others = [i for i in range(len(cluster.names)) if i != old]
        urls = [f"http://{cluster.endpoints[i]}/v3/maintenance/status" for i in others]
        self.proc = subprocess.Popen(cluster.prefix(others[0]) + [sys.executable, "-c", _POLL,
                                                                  str(st["header"]["member_id"]), *urls],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"etcd election clock did not start: {line!r}")
        self.timeout = timeout

    def seconds(self, killed_at: float) -> float | None:
        """Seconds from `killed_at` (time.time()) to a new leader, or None."""
        try:
            out, _ = self.proc.communicate(timeout=self.timeout + 120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        try:
            return float(out.strip().splitlines()[-1]) - killed_at
        except (ValueError, IndexError):
            return None
