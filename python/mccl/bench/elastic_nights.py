"""`mccl-bench elastic --week`: a week of a studio's nights compressed
(elastic_week.py), with the bench's member (a model of --params-mb MB,
--step-ms of emulated compute), a checkpoint folder, and the store's fault
in the middle of the week: `--store tcp` kills `mccl elastic serve` and
starts it again empty after --outage-s (on the lab too); `--store etcd`
kills the leader of a 3-node etcd cluster (on lab hosts 0-2, or here).

It prints one row per night (dusk: the first member back and training, the
step it resumed at against the dawn's; each later member's join; the
leave; the crash) and the store fault's figures.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .elastic import Run
from .elastic_week import Members, StoreFault, week
from .etcd_cluster import ElectionClock


class _Serve:
    """`mccl elastic serve` to kill and start again (on lab host 0, or here)."""

    def __init__(self, host: str, port: int, prefix: list[str]):
        self.host, self.port, self.prefix = host, port, prefix
        self.proc = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.prefix + [sys.executable, "-m", "mccl.cli", "elastic", "serve", "--host",
                                                    self.host, "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line or "listening" in line:
                break
        if self.proc.poll() is not None:
            raise RuntimeError("mccl-bench elastic --week: `mccl elastic serve` did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(30)


def _s(x) -> str:
    return "-" if x is None else f"{x:.2f} s"


def run_week(args, lab) -> None:
    folder = Path(tempfile.mkdtemp(prefix="mccl-week-"))
    r = Run(args, lab)
    print(f"# member logs: {r.logs}", flush=True)
    serve, cluster, fault = None, None, None
    try:
        if args.store == "etcd":
            store = r.start_store()
            cluster = r.etcd

            clock: list = []

            def kill_leader() -> int:
                node = cluster.wait_leader()
                timer = ElectionClock(cluster, node)  # up before the kill: it times to ~10 ms
                cluster.kill(node)
                clock[:] = [timer, time.time()]
                return node

            def election_s() -> float | None:
                timer, killed = clock
                return timer.seconds(killed)
            fault = StoreFault("etcd", kill_leader=kill_leader, restart=cluster.start,
                               wait_leader=cluster.wait_leader, election_s=election_s)
        else:
            host = lab.hosts[0].address if lab is not None else "127.0.0.1"
            serve = _Serve(host, 29400 + os.getpid() % 1000, lab.prefix(0) if lab is not None else [])
            serve.start()
            store = f"{host}:{serve.port}"
            fault = StoreFault("tcp", kill=serve.kill, start=serve.start)
        setter = r.setter(store)
        extra = ["--checkpoint-dir", str(folder / "ckpt"), "--timeout-s", str(args.timeout_s)]

        def first_step(i: int) -> int:
            commits = r.events("commit", [i])
            return min(e["step"] for _, e in commits) if commits else -1

        def ready_s(i: int):
            got = r.events("ready", [i])
            return got[0][1]["ready_s"] if got else None

        def max_step() -> int:
            r.poll()  # the members' latest lines (wait() polls; a plain look must too)
            return r.max_step()

        m = Members(start=lambda h, create: r.start_member(store, h, extra + (["--create"] if create else [])),
                    proc=lambda i: r.procs[i], world=r.world, max_step=max_step,
                    trained=lambda i: bool(r.events("commit", [i])), first_step=first_step,
                    record=setter.latest, wait=lambda what, cond, t: r.wait(what, cond, t),
                    end=setter.end, ready_s=ready_s,
                    start_armed=lambda h, path: r.start_member(store, h, extra + ["--ask-when", path]),
                    armed=lambda i: bool(r.events("armed", [i])))
        hosts = len(lab.hosts) if lab is not None else args.hosts
        nights = week(m, hosts, args.nights, fault, outage_s=args.outage_s, timeout=args.timeout_s * 4,
                      log=lambda text: print(text, flush=True))
        setter.close()
        state_mb = max((e["state_bytes"] for _, e in r.events("done")), default=0) / 1e6
        print(f"# a week of {args.nights} nights, {hosts} hosts, store {args.store}, {args.params_mb:g} MB model "
              f"({state_mb:.0f} MB of state), {args.step_ms:g} ms emulated step")
        print("# dusk: the first member's process start -> its first step, and its own account (asking to join "
              "-> the state ready); join: each later member's own account; leave: SIGTERM -> the leaver's process gone; "
              "crash: kill -9 -> training again without it; dawn: SIGTERM to all -> every process gone")
        print(f"{'night':>5} {'dusk first':>10} {'resume':>7} {'resumed at':>10} {'dawn step':>9} {'all in':>7} "
              f"{'join (median)':>13} {'leave':>6} {'crash':>6} {'dawn':>6}")
        for n in nights:
            joins = [j for j in n.join_s if j is not None]
            print(f"{n.night:>5} {n.dusk_first_s:>8.2f} s {_s(n.resume_s):>7} {n.dusk_step:>10} {n.dawn_step:>9} "
                  f"{n.dusk_s:>5.1f} s {_s(statistics.median(joins) if joins else None):>13} {n.leave_s:>4.2f} s "
                  f"{n.crash_s:>4.2f} s {_s(n.dawn_s or None):>6}")
        lost = [n.night for n in nights[1:] if n.dusk_step != nights[n.night - 2].dawn_step]
        print(f"steps lost at dawn: {'none' if not lost else lost}; store fault: "
              + json.dumps(next((n.fault for n in nights if n.fault), {})))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str))},
                           "nights": [vars(n) for n in nights]}, f, indent=1)
    finally:
        r.close()
        if serve is not None:
            serve.kill()
