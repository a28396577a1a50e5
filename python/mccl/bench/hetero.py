"""`mccl-bench hetero`: members at their own speed (Job(shares="speed")).

Members with emulated devices of relative speeds --speeds (a sleep per
sample: host cores stay free; mccl.bench.hetero_member), one per host of
--netlab (the store on host 0), or on this machine. One run measures, in
order:

1. solo: each member alone (no job, no network), all at once: samples/s;
   their sum is what a perfect fleet would do;
2. equal shares (today's Job) and speed shares, each a job of --steps
   steps: samples/s after --warmup steps, against the sum of the solos;
3. a slowdown: with speed shares, member --slow-member (default: the
   fastest) becomes --slow-factor times slower at step --slow-at; each
   step's samples/s against the new sum of solos, and how many boundaries
   the shares take to bring the job back to 90 % of it;
4. equal members (every speed 1): equal shares and speed shares alternated
   --cost-repeats times each; median step times side by side (what shares
   by speed cost when there is nothing to balance).
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


class Members:
    """Member processes of one phase, their JSON lines."""

    def __init__(self, lab, args):
        self.lab, self.args = lab, args
        self.procs: list[subprocess.Popen] = []
        self.lines: list[list[dict]] = []

    def start(self, host: int, argv: list[str]) -> None:
        a = self.args
        cmd = [sys.executable, "-m", "mccl.bench.hetero_member", "--sample-ms", str(a.sample_ms),
               "--batch", str(a.batch), "--params-mb", str(a.params_mb), *argv]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if self.lab is not None:
            cmd = self.lab.prefix(host) + cmd
            env.update(self.lab.rank_env(host))
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                             start_new_session=True)
        os.set_blocking(p.stdout.fileno(), False)
        self.procs.append(p)
        self.lines.append([])

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

    def events(self, ev: str, who: int | None = None) -> list[dict]:
        return [e for i, lines in enumerate(self.lines) if who is None or i == who for e in lines if e["ev"] == ev]

    def wait(self, what: str, cond, timeout: float = 600.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.poll()
            if cond():
                return
            if any(p.poll() not in (None, 0) for p in self.procs):
                raise RuntimeError(f"mccl-bench hetero: a member failed waiting for {what}")
            time.sleep(0.05)
        raise RuntimeError(f"mccl-bench hetero: timed out waiting for {what}")

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


class Bench:
    def __init__(self, args, lab):
        self.args, self.lab = args, lab
        self.store_proc = None
        self._master = None
        self.runs = 0

    def start_store(self) -> str:
        import torch.distributed as dist
        if self.lab is None:
            self._master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                         timeout=datetime.timedelta(seconds=60))
            return f"127.0.0.1:{self._master.port}"
        host, port = self.lab.hosts[0].address, 29400 + os.getpid() % 1000
        self.store_proc = subprocess.Popen(self.lab.prefix(0) + [sys.executable, "-m", "mccl.cli", "elastic", "serve",
                                                                 "--host", host, "--port", str(port)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.0)
        return f"{host}:{port}"

    def solo(self, speeds: list[float]) -> list[float]:
        m = Members(self.lab, self.args)
        try:
            for h, s in enumerate(speeds):
                m.start(h, ["--solo-steps", str(self.args.solo_steps), "--speed", str(s)])
            m.wait("the solo runs", lambda: all(m.events("solo", i) for i in range(len(speeds))))
            return [m.events("solo", i)[0]["samples_per_s"] for i in range(len(speeds))]
        finally:
            m.close()

    def job(self, store: str, speeds: list[float], shares: str, steps: int, slow: tuple | None = None) -> list[dict]:
        """One job to `steps` steps; rank 0's commits (step, t, total, shares by member)."""
        from ..elastic.membership import KeySetter
        self.runs += 1
        name = f"hetero-{os.getpid()}-{self.runs}"
        m = Members(self.lab, self.args)
        setter = KeySetter(store, name, prefix=self.lab.prefix(0) if self.lab else None)
        try:
            for h, s in enumerate(speeds):
                extra = ["--slow-at-step", str(slow[1]), "--slow-factor", str(slow[2])] if slow and slow[0] == h else []
                m.start(h, ["--store", store, "--job", name, "--initial", str(len(speeds)), "--shares", shares,
                            "--speed", str(s), *extra])
            m.wait("the first steps", lambda: any(e["step"] >= 1 for e in m.events("commit")))
            setter.end(steps)
            m.wait("the end", lambda: all(m.events("done", i) for i in range(len(speeds))) or
                   all(p.poll() is not None for p in m.procs))
            m.poll()
            by_step: dict[int, dict] = {}
            for i in range(len(speeds)):
                for e in m.events("commit", i):
                    d = by_step.setdefault(e["step"], {"step": e["step"], "total": e["total"], "shares": {}})
                    d["shares"][i] = e["share"]
                    if e["rank"] == 0:
                        d["t"] = e["t"]
            return [by_step[s] for s in sorted(by_step) if "t" in by_step[s]]
        finally:
            setter.close()
            m.close()

    def close(self) -> None:
        if self.store_proc is not None:
            self.store_proc.kill()


def rate(commits: list[dict], first: int) -> float:
    """Samples per second over the steps after `first`."""
    c = [e for e in commits if e["step"] >= first]
    return sum(e["total"] for e in c[1:]) / (c[-1]["t"] - c[0]["t"])


def step_times(commits: list[dict], first: int) -> list[float]:
    c = [e for e in commits if e["step"] >= first - 1]
    return [b["t"] - a["t"] for a, b in zip(c, c[1:])]


def slowdown(b: Bench, store: str, speeds: list[float], solo: list[float], args, out: dict) -> None:
    """Phase 3 (module doc): a member slows mid-run under speed shares."""
    ideal = sum(solo)
    who = args.slow_member if args.slow_member >= 0 else max(range(len(speeds)), key=lambda i: speeds[i])
    c = b.job(store, speeds, "speed", args.steps, slow=(who, args.slow_at, args.slow_factor))
    ideal_after = ideal - solo[who] + solo[who] / args.slow_factor
    per_step = {y["step"]: y["total"] / (y["t"] - x["t"]) for x, y in zip(c, c[1:])}
    after = [s for s in sorted(per_step) if s >= args.slow_at]
    back = next((k for k, s in enumerate(after) if all(per_step[t] >= 0.9 * ideal_after for t in after[k:k + 3])),
                None)
    steady = statistics.median(per_step[s] for s in after[-10:])
    out["slowdown"] = {"member": who, "ideal_after": ideal_after, "boundaries_to_90": back,
                       "steady_of_solo_sum": steady / ideal_after, "commits": c}
    print(f"member {who} slowed {args.slow_factor:g}x at step {args.slow_at}: back to 90 % of the new solo sum "
          f"({ideal_after:.1f}) after {back} boundaries; then {100 * steady / ideal_after:.1f} %", flush=True)
    shares_of = {e["step"]: e["shares"].get(who) for e in c}
    print("  step  " + " ".join(f"{s:6d}" for s in after[:8]))
    print("  % sum " + " ".join(f"{100 * per_step[s] / ideal_after:6.1f}" for s in after[:8]))
    print("  its share " + " ".join(f"{shares_of.get(s, 0):6d}" for s in after[:8]) +
          f"  (before: {shares_of.get(args.slow_at - 1)})", flush=True)


def run(args) -> None:
    lab = None
    if args.netlab:
        from ..netlab import Lab
        lab = Lab.load(args.netlab)
        print(f"# {lab.describe()}".replace("\n", "\n# "), flush=True)
    speeds = [float(s) for s in args.speeds.split(",")]
    if lab is not None and len(lab.hosts) < len(speeds):
        raise SystemExit(f"mccl-bench hetero: lab {args.netlab!r} has {len(lab.hosts)} hosts; needs {len(speeds)}")
    b = Bench(args, lab)
    out: dict = {"args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str))}}
    try:
        store = b.start_store()
        print(f"# {len(speeds)} members of speeds {args.speeds}; {args.batch} samples per member per step, "
              f"{args.sample_ms:g} ms per sample at speed 1 (emulated), {args.params_mb:g} MB of float32 "
              f"weights all-reduced per step", flush=True)
        phases = set(args.phases.split(","))
        solo = b.solo(speeds) if phases & {"shares", "slowdown"} else [1.0] * len(speeds)
        ideal = sum(solo)
        out["solo"] = solo
        if phases & {"shares", "slowdown"}:
            print("solo samples/s             " + "  ".join(f"{s:7.1f}" for s in solo) + f"   sum {ideal:7.1f}")
        for shares in ("equal", "speed") if "shares" in phases else ():
            c = b.job(store, speeds, shares, args.steps)
            r = rate(c, args.warmup)
            last = c[-1]["shares"]
            out[shares] = {"samples_per_s": r, "of_solo_sum": r / ideal, "commits": c}
            print(f"{shares:5} shares               {r:7.1f} samples/s = {100 * r / ideal:5.1f} % of the solo sum"
                  f"   (last step's shares {[last.get(i) for i in range(len(speeds))]})", flush=True)
        if "slowdown" in phases:
            slowdown(b, store, speeds, solo, args, out)
        if args.cost_repeats and "cost" in phases:
            equal = [1.0] * len(speeds)
            times: dict[str, list[float]] = {"equal": [], "speed": []}
            for _ in range(args.cost_repeats):
                for shares in ("equal", "speed"):
                    c = b.job(store, equal, shares, args.cost_steps)
                    times[shares].append(statistics.median(step_times(c, args.warmup)))
                    out.setdefault("equal_members_commits", []).append({"shares": shares, "commits": c})
            e, s = statistics.median(times["equal"]), statistics.median(times["speed"])
            out["equal_members"] = {"step_s": times}
            print(f"equal members: step {e * 1000:.1f} ms with equal shares, {s * 1000:.1f} ms with speed shares "
                  f"({100 * (s - e) / e:+.2f} %; medians of {args.cost_repeats} runs each, alternated)", flush=True)
    finally:
        b.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
