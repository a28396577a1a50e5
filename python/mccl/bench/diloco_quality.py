"""`mccl-bench diloco-quality`: what DiLoCo costs in quality, measured on a
small real task: scikit-learn's digits (1,797 8x8 images, 10 classes; the
data ships with scikit-learn), an MLP, N members on this machine (it is
about the arithmetic, not speed).

Every run is a real mccl.elastic job of N processes: "ddp" is a State
(DDP, AdamW, each step N x batch samples); "diloco:H" a DiLoCoState (AdamW
inside for H inner steps of batch samples per member, Nesterov SGD outside,
lr 0.7 and momentum 0.9 as in the DiLoCo paper); "streaming:H:P" the same in
P fragments with the default overlap; "bf16:H" and "int8:H" plain DiLoCo on
those wires (the others run on the fp32 wire). All train on the same number
of samples: S inner steps (DDP steps), S the first multiple of every H swept
past --epochs epochs of the training split. The test split's loss and
accuracy of the job's parameters (DDP's, DiLoCo's global ones) are recorded
as training goes; the table has the final ones, mean and spread over seeds.

    mccl-bench diloco-quality --ns 4,8 --hs 4,8,16,32 --seeds 0,1,2 \\
        --configs streaming:16:4,bf16:16,int8:16 --plot docs/img/diloco-quality.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

BATCH, LR, HIDDEN = 16, 1e-3, 128
OUTER_LR, OUTER_MOMENTUM = 0.7, 0.9


def data():
    import torch
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)  # one split for every run
    perm = torch.randperm(len(y), generator=g)
    cut = int(0.8 * len(y))
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


def model(seed: int):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                               torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10))


def worker(a) -> int:
    import torch
    import torch.nn.functional as F

    import mccl.elastic as elastic
    torch.set_num_threads(1)
    xtr, ytr, xte, yte = data()
    net = model(a.seed)
    sampler = elastic.ElasticSampler(len(ytr), batch=BATCH, seed=a.seed)
    kind, *rest = a.config.split(":")
    inner = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=0.0)
    if kind == "ddp":
        state = elastic.State(net, inner, sampler)
    else:
        H = int(rest[0])
        frags = int(rest[1]) if kind == "streaming" else 1
        wire = kind if kind in ("bf16", "int8") else "fp32"
        outer = torch.optim.SGD(net.parameters(), lr=OUTER_LR, momentum=OUTER_MOMENTUM, nesterov=True)
        state = elastic.DiLoCoState(net, inner, outer, sampler, H=H, fragments=frags, wire_dtype=wire)
    job = elastic.Job(a.store, a.job, initial=a.world, create=True, timeout_s=120.0, initial_wait_s=60.0)
    curve = []
    import copy
    probe = copy.deepcopy(net)

    def evaluate(step: int):
        with torch.no_grad():
            if kind == "ddp":
                params = None
            else:  # the job's (global) parameters
                params = True
                for f, pieces in enumerate(state.pieces):
                    off = 0
                    for i, lo, hi in pieces:
                        list(probe.parameters())[i].view(-1)[lo:hi].copy_(state.globals[f][off:off + hi - lo])
                        off += hi - lo
            m = net if params is None else probe
            out = m(xte)
            curve.append({"step": step, "samples": step * BATCH * a.world,
                          "loss": float(F.cross_entropy(out, yte)),
                          "accuracy": float((out.argmax(1) == yte).float().mean()),
                          "train_loss": float(F.cross_entropy(m(xtr), ytr))})

    def train_step(m, idx):
        loss = F.cross_entropy(m(xtr[idx]), ytr[idx]) if idx else m(xtr[:0]).sum() * 0.0
        loss.backward()
        return loss

    def on_step(job, st, loss):
        if job.rank != 0:
            return
        if kind == "ddp":
            if st.step % a.eval_every == 0:
                evaluate(st.step)
        elif st.inner_clock % int(rest[0]) == 1:
            evaluate(st.inner_clock - 1)  # the global parameters of the round that just ended

    evaluate(0)
    job.run(state, train_step, steps=a.steps, on_step=on_step)
    if job.rank == 0:
        evaluate(a.steps)
        with open(a.out, "w") as f:
            json.dump({"config": a.config, "seed": a.seed, "world": a.world, "steps": a.steps, "curve": curve}, f)
    import torch.distributed as dist
    dist.destroy_process_group()
    return 0


def one(config: str, n: int, seed: int, steps: int, eval_every: int, tmp: str) -> dict:
    import datetime

    import torch.distributed as dist

    from ..elastic.membership import EPOCH_KEY
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=60))
    master.set(EPOCH_KEY, repr(time.time() - 3600))  # not a store that just restarted: no re-seed wait
    out = os.path.join(tmp, f"{config.replace(':', '_')}-n{n}-s{seed}.json")
    cmd = [sys.executable, "-m", "mccl.bench.diloco_quality", "--worker", "--store", f"127.0.0.1:{master.port}",
           "--job", "q", "--world", str(n), "--config", config, "--seed", str(seed), "--steps", str(steps),
           "--eval-every", str(eval_every), "--out", out]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(n)]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    bad = [i for i, p in enumerate(procs) if p.returncode != 0]
    if bad or not os.path.exists(out):
        raise RuntimeError(f"diloco-quality {config} n={n} seed={seed}: workers {bad} failed:\n{logs[bad[0] if bad else 0][-3000:]}")
    with open(out) as f:
        return json.load(f)


def run(args) -> None:
    ns = [int(x) for x in args.ns.split(",")]
    hs = [int(x) for x in args.hs.split(",") if x]
    seeds = [int(x) for x in args.seeds.split(",")]
    configs = ["ddp"] + [f"diloco:{h}" for h in hs] + [c for c in args.configs.split(",") if c]
    every = math.lcm(*([int(c.split(":")[1]) for c in configs if c != "ddp"] or [1]))
    xtr = data()[0]
    results = []
    tmp = tempfile.mkdtemp(prefix="mccl-diloco-quality-")
    for n in ns:
        per_epoch = math.ceil(len(xtr) / (BATCH * n))
        steps = math.ceil(args.epochs * per_epoch / every) * every
        print(f"# N={n}: {steps} inner steps ({steps * BATCH * n / len(xtr):.1f} epochs of {len(xtr)} samples, "
              f"{BATCH} per member per step)", flush=True)
        for config in configs:
            for seed in seeds:
                t0 = time.time()
                r = one(config, n, seed, steps, max(1, every // 4), tmp)
                r["seconds"] = time.time() - t0
                results.append(r)
                last = r["curve"][-1]
                print(f"{config:<16} N={n} seed={seed}: test loss {last['loss']:.4f}, accuracy "
                      f"{100 * last['accuracy']:.2f} % ({r['seconds']:.0f} s)", flush=True)
    table = render(results, ns, configs)
    print(table)
    if args.table:
        with open(args.table, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f)
    if args.plot:
        plot(results, ns, configs, args.plot)
        print(f"# wrote {args.plot}")


def _stats(vals: list[float]) -> str:
    m = statistics.mean(vals)
    return f"{m:.4f} ± {statistics.stdev(vals):.4f}" if len(vals) > 1 else f"{m:.4f}"


def render(results: list[dict], ns: list[int], configs: list[str]) -> str:
    lines = ["| N | configuration | outer syncs | train loss | test loss | test accuracy % | best test loss |",
             "|---|---|---|---|---|---|---|"]
    for n in ns:
        for c in configs:
            rs = [r for r in results if r["world"] == n and r["config"] == c]
            if not rs:
                continue
            loss = [r["curve"][-1]["loss"] for r in rs]
            train = [r["curve"][-1]["train_loss"] for r in rs]
            best = [min(p["loss"] for p in r["curve"]) for r in rs]
            acc = [100 * r["curve"][-1]["accuracy"] for r in rs]
            syncs = "every step" if c == "ddp" else str(rs[0]["steps"] // int(c.split(":")[1]))
            accs = f"{statistics.mean(acc):.2f} ± {statistics.stdev(acc):.2f}" if len(acc) > 1 else f"{acc[0]:.2f}"
            lines.append(f"| {n} | {c} | {syncs} | {_stats(train)} | {_stats(loss)} | {accs} | {_stats(best)} |")
    return "\n".join(lines)


def plot(results: list[dict], ns: list[int], configs: list[str], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(ns), figsize=(6 * len(ns), 8), squeeze=False)
    seeds = len(set(r["seed"] for r in results))
    for col, n in enumerate(ns):
        for row, (key, what) in enumerate((("train_loss", "training loss"), ("loss", "test loss"))):
            ax = axes[row][col]
            for c in configs:
                rs = [r for r in results if r["world"] == n and r["config"] == c]
                if not rs:
                    continue
                # The mean curve over seeds, on the points every seed has.
                steps = sorted(set.intersection(*[{p["step"] for p in r["curve"]} for r in rs]))
                xs = [s * BATCH * n / 1000 for s in steps]
                ys = [statistics.mean(next(p[key] for p in r["curve"] if p["step"] == s) for r in rs) for s in steps]
                ax.plot(xs, ys, label=c, lw=1.8 if c == "ddp" else 1.1, color="black" if c == "ddp" else None)
            ax.set_yscale("log")
            ax.set_title(f"N = {n}: {what} (cross-entropy), mean of {seeds} seeds")
            ax.set_xlabel("samples trained (thousands)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=85)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--store")
    p.add_argument("--job", default="q")
    p.add_argument("--world", type=int)
    p.add_argument("--config")
    p.add_argument("--seed", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--eval-every", type=int, default=8)
    p.add_argument("--out")
    a = p.parse_args(argv)
    return worker(a)


if __name__ == "__main__":
    sys.exit(main())
