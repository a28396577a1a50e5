"""`mccl-bench diloco`: compute utilisation of an emulated large model under
DDP, DiLoCo and streaming DiLoCo, one member per network-lab host.

Each configuration is one run of N members (mccl.bench.diloco_member): an
emulated model of --params-m million float32 parameters (one flat tensor),
--compute-ms of emulated device time per step (sleeps: the lab's hosts share
this machine's cores). Per run it prints

- utilisation: compute slept / wall time, in the steady state (DiLoCo:
  rounds 2 .. R-1 whole, each with its outer syncs' applications and its
  end's all_reduce: the first round warms the connections up and its end
  absorbs the members' start skew, printed as "start skew"; DDP: from the
  second step);
- exposed: the time members waited for the network (DDP: the buckets after
  backward; DiLoCo: the fragments' all-reduces at their application points);
- hidden: the share of the outer syncs' time on the wire (issue to sum
  received, MCCL's completion thread) that compute covered: 1 - exposed /
  on-wire;
- host: the outer steps' own work on the host (the optimizer, the merges).

--rates sets every lab host's link before each group of runs (the lab's
tbf), and the plan tool's model of an outer sync (mccl.plan.diloco_project)
is printed beside each measurement and projected to --project members.

    mccl netlab up 8 --rate 1gbit --name diloco
    mccl-bench diloco --netlab diloco --params-m 62.5 --rates 62.5mbit,625mbit --modes ddp,diloco,streaming

With --params-m 62.5 (250 MB) and links of 62.5 / 625 Mbit/s, every byte
count and every rate is 1/16 of a 1 B-parameter model (4 GB) on 1 / 10
Gbit/s links, so every transfer takes as long as there, and the compute
per step is unchanged (docs/benchmarks.md ran --params-m 15.625 at
15.625mbit,156.25mbit: 1/64). --outer-wire and --wire-reduce choose the
outer syncs' wire; the projection to --project members is printed as the
plan has it and calibrated on the run (projections()).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

MODES = {"ddp": {}, "diloco": {"fragments": 1}, "streaming": {}}


def _member(args, lab, store: str, host: int, mode: str, extra: list[str], job: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mccl.bench.diloco_member", "--mode", "ddp" if mode == "ddp" else "diloco",
           "--store", store, "--job", job, "--world", str(args.members),
           "--rank", str(host), "--params-m", str(args.params_m), "--compute-ms", str(args.compute_ms),
           "--wire", args.ddp_wire if mode == "ddp" else args.wire, "--wire-reduce", args.wire_reduce,
           "--H", str(args.H),
           "--rounds", str(args.rounds), "--steps", str(args.ddp_steps), "--bucket-mb", str(args.bucket_mb),
           *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if lab is not None:
        cmd = lab.prefix(host) + cmd
        env.update(lab.rank_env(host))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def one(args, lab, mode: str, store_runner) -> dict:
    extra = []
    if mode == "diloco":
        extra = ["--fragments", "1"]
    elif mode == "streaming":
        extra = ["--fragments", str(args.fragments)] + (["--overlap", str(args.overlap)] if args.overlap >= 0 else [])
    store = store_runner.start_store()
    job = f"bench-{mode}-{int(time.time() * 1000)}"
    procs = [_member(args, lab, store, h, mode, extra, job) for h in range(args.members)]
    results, errors = [], []
    for h, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            errors.append(f"host {h} timed out")
        lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
        if p.returncode != 0 or (mode != "ddp" or h == 0) and not lines:
            errors.append(f"host {h} exited {p.returncode}: {err[-1500:]}")
        results += [json.loads(x[7:]) for x in lines]
    if errors:
        raise RuntimeError(f"mccl-bench diloco {mode}: " + "\n".join(errors))
    return summarise(mode, results)


def summarise(mode: str, results: list[dict]) -> dict:
    """The slowest member's utilisation (the job goes at its pace)."""
    worst = min(results, key=lambda r: r["compute_s"] / r["wall_s"])
    out = {k: worst[k] for k in ("mode", "world", "wall_s", "compute_s", "inner_steps", "waited_s", "host_s", "wire")}
    out["mode"] = mode
    out["utilisation"] = worst["compute_s"] / worst["wall_s"]
    if "cpu_s" in worst:  # the process's CPU time in the window, all threads (MCCL's included)
        out["cpu_s"], out["issue_s"] = worst["cpu_s"], worst.get("issue_s")
    wire = [w for r in results for w in r.get("wire_s", [])]
    if wire:
        on_wire = statistics.median(wire) * worst["syncs"]
        out["on_wire_s"] = on_wire
        out["sync_s"] = statistics.median(wire)
        out["hidden"] = max(0.0, 1.0 - worst["waited_s"] / on_wire) if on_wire > 0 else None
        out["syncs"] = worst["syncs"]
        out["fragments"], out["overlap"], out["H"] = worst["fragments"], worst["overlap"], worst["H"]
    if "start_skew_s" in worst:  # the first round's end: the members' start skew (not in the window)
        out["start_skew_s"] = max(r["start_skew_s"] for r in results)
        out["boundary_s"] = statistics.median(b for r in results for b in r["boundary_s"]) \
            if any(r["boundary_s"] for r in results) else None
    if mode == "ddp":
        out["step_s"] = statistics.median(worst["step_s"])
    return out


def run(args) -> None:
    from .elastic import Run

    lab = None
    if args.netlab:
        from ..netlab import Lab
        lab = Lab.load(args.netlab)
        if len(lab.hosts) < args.members:
            raise SystemExit(f"mccl-bench diloco: lab {args.netlab!r} has {len(lab.hosts)} hosts; --members {args.members}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"mccl-bench diloco: unknown modes {bad}; choose from {', '.join(MODES)}")
    if args.rounds < 3 and set(modes) - {"ddp"}:
        raise SystemExit(f"mccl-bench diloco: --rounds {args.rounds}: DiLoCo runs need at least 3 (the first warms "
                         "up and absorbs the members' start skew, the last ends the job; those between are measured "
                         "whole, each with its end)")
    rates = [r.strip() for r in args.rates.split(",") if r.strip()] if args.rates else [None]
    rows = []
    for rate in rates:
        goodput = None
        if lab is not None:
            if rate is not None:
                for h in range(len(lab.hosts)):
                    lab.set_rate(h, rate)
            goodput = lab.measure_goodput()["min_GBps"]
            print(f"# links {rate or lab.rate}: TCP goodput {goodput * 8:.3f} Gbit/s per link (iperf3)", flush=True)
        gbit = goodput * 8 if goodput else args.link_gbit
        here = {}
        for mode in modes:
            runner = Run(_StoreArgs(args), lab)
            try:
                row = one(args, lab, mode, runner)
            finally:
                runner.close()
            row["rate"], row["goodput_gbit"] = rate, gbit
            row["predicted"] = predicted(args, mode, args.members, gbit, row)
            row["sync_factor"] = sync_factor(row)
            rows.append(row)
            here[mode] = row
            print(render_row(row), flush=True)
        if gbit:
            for line in projections(args, here, args.members, args.project, gbit):
                print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))},
                       "rows": rows, "lab": lab.describe() if lab else None}, f, indent=1)
        print(f"# wrote {args.json}", flush=True)


def projections(args, here: dict, lab_n: int, ns: list[int], gbit: float) -> list[str]:
    """The plan's model at more members, as it is (plan) and calibrated on
    this lab's runs (`here`: mode -> row, changed in place): a DiLoCo mode's
    sync time scaled by its measured sync factor, and per round the time
    that was neither compute nor waiting for a sync (the outer steps' host
    work and the loop's own) as measured. The calibrated model at the lab's
    N is printed beside the measurement, as its check."""
    lines = []
    for n in [lab_n] + list(ns):
        for mode, row in here.items():
            pr = predicted(args, mode, n, gbit, None)
            text = (f"#   plan at N={n:<4} {mode:<10} utilisation {100 * pr['utilisation']:5.1f} %  "
                    f"(sync {pr['sync_s']:.1f} s, exposed {pr['exposed_s']:.1f} s per {pr['per']})")
            got = {"plan": pr}
            if mode != "ddp" and row.get("syncs"):
                cal = predicted(args, mode, n, gbit, row, row["sync_factor"], calibrate=True)
                got["calibrated"] = cal
                text += (f"; calibrated (sync x{row['sync_factor']:.2f}, other {cal['host_s']:.1f} s per "
                         f"round): {100 * cal['utilisation']:5.1f} %")
            if n == lab_n:
                text += f"  [measured {100 * row['utilisation']:.1f} %]"
            row.setdefault("projected", {})[str(n)] = got
            lines.append(text)
    return lines


class _StoreArgs:
    """What bench.elastic.Run needs to start `mccl elastic serve` on host 0."""

    def __init__(self, args):
        self.store, self.job = "tcp", "diloco-bench"


def sync_factor(row: dict) -> float:
    """A DiLoCo run's measured time of one fragment's sync on the wire over
    the plan's (1.0 where there is none: DDP, no lab)."""
    p = row["predicted"]
    if not row.get("sync_s") or p.get("per") != "round" or not p["sync_s"]:
        return 1.0
    return row["sync_s"] / (p["sync_s"] / max(1, p["fragments"]))


def predicted(args, mode: str, n: int, gbit: float | None, row: dict | None, factor: float = 1.0,
              calibrate: bool = False) -> dict:
    """The plan's model (mccl.plan.diloco_project / project) for this run's
    settings at n members; host work per round from the run where given
    (calibrate: all of the run's time per round that was neither compute
    nor waiting), the sync time scaled by `factor` (sync_factor of a run)."""
    from .. import plan as planner
    beta = 8.0 / gbit if gbit else planner._NET["beta_ns_per_byte"]
    params = int(args.params_m * 1e6)
    compute = args.compute_ms / 1000
    if mode == "ddp":
        inp = planner.Inputs(params=params, batch=1, compute_s=compute, hidden=0.0, beta_ns_per_byte=beta,
                             bucket_mb=args.bucket_mb, backward_share=2 / 3)
        r = planner.project(inp, n)
        return {"utilisation": r["efficiency"], "sync_s": r["comm_s"], "exposed_s": r["exposed_s"], "per": "step"}
    fragments = 1 if mode == "diloco" else args.fragments
    host = 0.0
    if row is not None and row.get("syncs"):
        rounds = row["inner_steps"] / args.H
        other = row["wall_s"] - row["compute_s"] - row["waited_s"] if calibrate else row["host_s"]
        host = max(0.0, other) / max(1.0, rounds)
    return planner.diloco_project(params=params, H=args.H, inner_s=compute, n=n, wire=args.wire,
                                  fragments=fragments, overlap=None if mode == "diloco" or args.overlap < 0
                                  else args.overlap, beta_ns_per_byte=beta, host_s=host, sync_factor=factor)


def render_row(r: dict) -> str:
    p = r["predicted"]
    text = (f"{r['mode']:<10} N={r['world']:<3} links {r['rate'] or '-':<9} wire {r['wire']:<18} "
            f"utilisation {100 * r['utilisation']:5.1f} % (plan {100 * p['utilisation']:5.1f} %)  "
            f"exposed {r['waited_s']:7.1f} s of {r['wall_s']:7.1f} s")
    if r.get("hidden") is not None:
        text += (f"  outer syncs: {r['syncs']} x {r['sync_s']:.2f} s on the wire (plan {p['sync_s'] / max(1, p.get('fragments', 1)):.2f} s), "
                 f"{100 * r['hidden']:.1f} % hidden; host {r['host_s']:.1f} s")
    if r.get("cpu_s") is not None:
        text += f"; CPU {r['cpu_s']:.1f} s; issuing {r.get('issue_s') or 0.0:.2f} s"
    if r.get("start_skew_s") is not None:
        b = r.get("boundary_s")
        text += (f"; rounds' ends {'-' if b is None else f'{1000 * b:.0f} ms'} (median), "
                 f"start skew {r['start_skew_s']:.1f} s (round 1, not measured)")
    if r.get("step_s"):
        text += f"  step {r['step_s']:.1f} s (plan {p['sync_s'] + 0:.1f} s comm)"
    return text
