"""`mccl-bench elastic`: what a changing fleet costs an mccl.elastic job.

One run: `initial` members start (mccl.bench.elastic_member, a model of
--params-mb of float32 weights, SGD with momentum, --step-ms of emulated
device time), train a stable stretch, then one member joins, one leaves
gracefully (SIGTERM, as the agent sends), one is killed (SIGKILL). Measured,
per run, on the members' own clocks (one machine: the lab's hosts share it):

- stable: the step-boundary check (one small all_reduce, rank 0's look at
  the store) as a share of the step;
- join: the members' stall (boundary to new group ready, state sent) beside
  state bytes / goodput;
- leave: the survivors' stall (the shrink);
- crash: from the kill to the survivors' next completed step (includes the
  redone step's emulated compute), and steps lost.

With --netlab, member i runs on lab host i and the store on host 0; without,
everything runs on this machine. With --anchor, the same kill under
torchrun's elastic mode (mccl.bench.elastic_anchor) for comparison.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time


class Run:
    def __init__(self, args, lab=None):
        self.args, self.lab = args, lab
        self.procs: list[subprocess.Popen] = []
        self.lines: list[list[dict]] = []
        self.store_proc = None
        self._master = None
        self.etcd = None
        import tempfile
        self.logs = tempfile.mkdtemp(prefix="mccl-bench-elastic-")

    def start_store(self) -> str:
        """The job's store: `mccl elastic serve` on host 0 (here: a TCPStore in
        this process), or with --store etcd a 3-node etcd cluster on hosts
        0-2 (here: on 127.0.0.1)."""
        import torch.distributed as dist
        if getattr(self.args, "store", "tcp") == "etcd":
            import tempfile
            from pathlib import Path

            from .etcd_cluster import EtcdCluster
            base = Path(tempfile.mkdtemp(prefix="mccl-etcd-"))
            if self.lab is not None:
                if len(self.lab.hosts) < 3:
                    raise SystemExit("mccl-bench elastic --store etcd on a lab needs 3 hosts for etcd's nodes")
                self.etcd = EtcdCluster(base, hosts=[self.lab.hosts[i].address for i in range(3)],
                                        prefix=self.lab.prefix)
            else:
                self.etcd = EtcdCluster(base)
            self.etcd.start()
            self.etcd.wait_leader(60)
            return self.etcd.url(f"/{self.args.job}/")
        port = 29400 + (os.getpid() % 1000)
        if self.lab is None:
            self._master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                         timeout=datetime.timedelta(seconds=60))
            return f"127.0.0.1:{self._master.port}"
        host = self.lab.hosts[0].address
        self.store_proc = subprocess.Popen(self.lab.prefix(0) + [sys.executable, "-m", "mccl.cli", "elastic", "serve",
                                                                 "--host", host, "--port", str(port)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.0)
        return f"{host}:{port}"

    def start_member(self, store: str, host: int, extra: list[str] | None = None) -> int:
        a = self.args
        cmd = [sys.executable, "-m", "mccl.bench.elastic_member", "--store", store, "--job", a.job,
               "--initial", str(a.initial), "--params-mb", str(a.params_mb), "--step-ms", str(a.step_ms),
               *(extra or [])]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if self.lab is not None:
            cmd = self.lab.prefix(host) + cmd
            env.update(self.lab.rank_env(host))
        # Each member's log (its stderr: mccl.elastic's lines) beside the run,
        # for when a figure needs explaining.
        with open(os.path.join(self.logs, f"member{len(self.procs)}-h{host}.log"), "w") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                 start_new_session=True)
        self.procs.append(p)
        self.lines.append([])
        os.set_blocking(p.stdout.fileno(), False)
        return len(self.procs) - 1

    def poll(self) -> None:
        for i, p in enumerate(self.procs):
            while True:
                try:
                    line = p.stdout.readline()
                except (ValueError, OSError):
                    break
                if not line:
                    break
                if line.startswith("{"):
                    self.lines[i].append(json.loads(line))

    def events(self, ev: str, who=None):
        out = []
        for i, lines in enumerate(self.lines):
            if who is None or i in who:
                out += [(i, e) for e in lines if e["ev"] == ev]
        return out

    def world(self) -> int:
        commits = self.events("commit")
        if not commits:
            return 0
        return max(commits, key=lambda ie: (ie[1]["step"], ie[1]["t"]))[1]["world"]

    def max_step(self) -> int:
        return max((e["step"] for _, e in self.events("commit")), default=-1)

    def wait(self, what: str, cond, timeout: float = 300.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.poll()
            if cond():
                return
            time.sleep(0.02)
        raise RuntimeError(f"mccl-bench elastic: timed out waiting for {what}")

    def setter(self, store: str):
        """A helper that sets the job's keys (from host 0's namespace on a lab)."""
        from ..elastic.membership import KeySetter
        return KeySetter(store, self.args.job, prefix=self.lab.prefix(0) if self.lab else None)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.store_proc is not None:
            self.store_proc.kill()
        if self.etcd is not None:
            self.etcd.stop()


def one_run(args, lab, goodput_GBps: float | None) -> dict:
    r = Run(args, lab)
    print(f"# member logs: {r.logs}", flush=True)
    try:
        store = r.start_store()
        setter = r.setter(store)
        saves = []
        if args.checkpoint_every_s:
            import tempfile
            saves = ["--checkpoint-dir", tempfile.mkdtemp(prefix="mccl-bench-ckpt-"),
                     "--checkpoint-every-s", str(args.checkpoint_every_s)]
        members = [r.start_member(store, h, saves) for h in range(args.initial)]
        r.wait("the first generation", lambda: r.max_step() >= args.stable_steps)
        r.start_member(store, args.initial, saves)
        r.wait("the join", lambda: r.world() == args.initial + 1)
        time.sleep(3 * args.step_ms / 1000)
        r.procs[members[1]].send_signal(signal.SIGTERM)
        r.wait("the leave", lambda: r.world() == args.initial)
        time.sleep(3 * args.step_ms / 1000)
        r.poll()
        before = r.max_step()
        t_kill = time.time()
        os.killpg(r.procs[members[2]].pid, signal.SIGKILL)
        r.wait("the crash recovery", lambda: r.world() == args.initial - 1)
        r.wait("steps after the crash", lambda: r.max_step() >= before + 3)
        setter.end(r.max_step() + 5)
        setter.close()
        alive = [i for i in range(len(r.procs)) if i not in (members[1], members[2])]
        r.wait("the end", lambda: all(r.procs[i].poll() is not None for i in alive) or
               all(r.events("done", [i]) for i in alive), timeout=120)
        r.poll()
        # Measurements, from member 0 (a member throughout).
        ch = {e["cause"]: e for _, e in r.events("change", [members[0]])}
        commits0 = [e for _, e in r.events("commit", [members[0]])]
        steps = sorted(commits0, key=lambda e: e["t"])
        stable = [b["t"] - a["t"] for a, b in zip(steps, steps[1:]) if b["step"] < args.stable_steps and a["step"] > 1]
        done0 = r.events("done", [members[0]])[0][1]
        after = [e for e in commits0 if e["t"] > t_kill]
        first_after = min(after, key=lambda e: e["t"])
        state_bytes = done0["state_bytes"]
        out = {
            "step_s": statistics.median(stable) if stable else None,
            "boundary_s": statistics.median(done0["boundary_s"]),
            "join_stall_s": ch["join"]["stall_s"], "join_bytes": ch["join"]["bytes"],
            "join_parts": ch["join"].get("parts", {}),
            "join_floor_s": state_bytes / (goodput_GBps * 1e9) if goodput_GBps else None,
            "leave_stall_s": ch["leave"]["stall_s"],
            "crash_to_next_step_s": first_after["t"] - t_kill,
            "crash_steps_lost": max(0, before + 1 - first_after["step"]),
            "crash_recovery_stall_s": ch["crash"]["stall_s"],
            "state_bytes": state_bytes,
            # rank 0's periodic background saves: each one's stall of the loop
            "save_stall_s": statistics.median(done0["save_stalls_s"]) if done0.get("save_stalls_s") else None,
            "saves": len(done0.get("save_stalls_s") or []),
        }
        return out
    finally:
        r.close()


def run(args) -> None:
    lab, goodput = None, None
    if args.netlab:
        from ..netlab import Lab
        lab = Lab.load(args.netlab)
    if args.week:
        from .elastic_nights import run_week
        if lab is not None:
            print(f"# {lab.describe()}".replace("\n", "\n# "), flush=True)
        run_week(args, lab)
        return
    if lab is not None:
        if len(lab.hosts) < args.initial + 1:
            raise SystemExit(f"mccl-bench elastic: lab {args.netlab!r} has {len(lab.hosts)} hosts; "
                             f"needs {args.initial + 1}")
        goodput = (lab.goodput or {}).get("min_GBps")
        print(f"# {lab.describe()}".replace("\n", "\n# "), flush=True)
    else:
        goodput = None
    rows = []
    for i in range(args.repeats):
        row = one_run(args, lab, goodput)
        rows.append(row)
        print(f"# run {i + 1}: " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                                 for k, v in row.items()}, default=str), flush=True)

    def med(k):
        vals = [r[k] for r in rows if r[k] is not None]
        return statistics.median(vals) if vals else None

    print(f"# mccl.elastic, {args.initial} members (+1 join, -1 leave, -1 crash), "
          f"{args.params_mb:g} MB model ({med('state_bytes') / 1e6:.0f} MB of state with momentum), "
          f"{args.step_ms:g} ms emulated step; medians of {len(rows)} runs")
    print(f"stable step                      {med('step_s') * 1000:9.1f} ms")
    print(f"step-boundary check              {med('boundary_s') * 1000:9.2f} ms "
          f"({100 * med('boundary_s') / med('step_s'):.2f} % of the step)")
    floor = med("join_floor_s")
    print(f"join stall                       {med('join_stall_s') * 1000:9.1f} ms"
          + (f"  (state / goodput: {floor * 1000:.1f} ms)" if floor else ""))
    print(f"graceful leave stall             {med('leave_stall_s') * 1000:9.1f} ms  (0 steps lost)")
    if med("save_stall_s") is not None:
        print(f"periodic save (every {args.checkpoint_every_s:g} s)  {med('save_stall_s') * 1000:9.1f} ms stall "
              f"({100 * med('save_stall_s') / med('step_s'):.2f} % of the step it falls in; "
              f"{sum(r['saves'] for r in rows)} saves)")
    print(f"crash: death -> next step done   {med('crash_to_next_step_s') * 1000:9.1f} ms  "
          f"(recovery {med('crash_recovery_stall_s') * 1000:.1f} ms; steps lost "
          f"{max(r['crash_steps_lost'] for r in rows)})")
    anchors = []
    if args.anchor:
        for i in range(args.repeats):
            anchors.append(anchor(args, lab))
            print(f"# torchrun run {i + 1}: " + json.dumps({k: round(v, 3) for k, v in anchors[-1].items()}),
                  flush=True)
        res = statistics.median(a["resume_s"] for a in anchors)
        lost = statistics.median(a["steps_lost"] for a in anchors)
        print(f"torchrun --nnodes {args.initial - 1}:{args.initial} (Gloo, checkpoint every 10 steps), a host killed: "
              f"resumed after {res:.1f} s, {lost:g} steps lost "
              f"({res / med('crash_to_next_step_s'):.0f}x mccl.elastic's death -> next step)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str))},
                       "runs": rows, "torchrun": anchors}, f, indent=1)


def _kill_tree(pid: int) -> None:
    """SIGKILL to pid and every process below it (torchrun starts its
    workers in sessions of their own, so a process group is not enough)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    todo, tree = [pid], []
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def anchor(args, lab) -> dict:
    """torchrun --nnodes MIN:MAX with Gloo on the same hosts: one host killed."""
    import tempfile
    n = args.initial
    ckpt = tempfile.mkdtemp(prefix="mccl-anchor-")
    rdzv = f"{lab.hosts[0].address}:29510" if lab else "127.0.0.1:29510"
    procs, lines = [], []
    try:
        for h in range(n):
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={n - 1}:{n}", "--nproc_per_node=1",
                   "--rdzv_backend=c10d", f"--rdzv_endpoint={rdzv}", "--rdzv_id=anchor",
                   "--monitor_interval=0.5", "--max_restarts=3",
                   # Host 0 holds the rendezvous store; torchrun cannot tell by
                   # its address inside a lab's namespace, so say so.
                   f"--rdzv_conf=is_host={int(h == 0)}", "-m", "mccl.bench.elastic_anchor",
                   "--ckpt", ckpt, "--params-mb", str(args.params_mb), "--step-ms", str(args.step_ms)]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            if lab is not None:
                # Every namespace has the machine's hostname: agents advertise
                # their lab address (the workers' MASTER_ADDR comes from it).
                cmd = lab.prefix(h) + cmd[:3] + [f"--local_addr={lab.hosts[h].address}"] + cmd[3:]
                env["GLOO_SOCKET_IFNAME"] = "eth0"
            with open(os.path.join(ckpt, f"torchrun{h}.log"), "w") as err:
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                     start_new_session=True)
            os.set_blocking(p.stdout.fileno(), False)
            procs.append(p)
            lines.append([])

        def poll():
            for i, p in enumerate(procs):
                while True:
                    try:
                        line = p.stdout.readline()
                    except (ValueError, OSError):
                        break
                    if not line:
                        break
                    if line.startswith("{"):
                        lines[i].append(json.loads(line))

        def wait(what, cond, timeout=float(args.anchor_timeout_s)):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                poll()
                if cond():
                    return
                time.sleep(0.05)
            tails = []
            for h in range(n):
                with open(os.path.join(ckpt, f"torchrun{h}.log")) as f:
                    tails.append(f"--- host {h}\n" + "".join(f.readlines()[-15:]))
            raise RuntimeError(f"mccl-bench elastic --anchor: timed out waiting for {what}\n" + "\n".join(tails))

        def steps(i):
            return [e for e in lines[i] if e["ev"] == "commit"]

        wait("torchrun's first 15 steps", lambda: steps(0) and steps(0)[-1]["step"] >= 15)
        victim = n - 1  # not host 0, which holds the rendezvous
        poll()
        at_kill = max(e["step"] for e in steps(0))
        t_kill = time.time()
        _kill_tree(procs[victim].pid)  # the host dies: its agent and its worker
        wait("the restarted workers' next step",
             lambda: any(e["t"] > t_kill and e["world"] == n - 1 for e in steps(0)))
        first = min((e for e in steps(0) if e["t"] > t_kill and e["world"] == n - 1), key=lambda e: e["t"])
        resumed = [e for e in lines[0] if e["ev"] == "resumed" and e["t"] > t_kill]
        return {"resume_s": first["t"] - t_kill,
                "steps_lost": at_kill + 1 - (resumed[0]["step"] if resumed else 0), "at_kill": at_kill}
    finally:
        for p in procs:
            _kill_tree(p.pid)  # torchrun's workers live in sessions of their own
