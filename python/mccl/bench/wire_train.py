"""mccl-bench wire-train: ViT DDP with each wire compression, side by side.

For every seed, the same training run (same initial weights and data) with
each configuration: mccl with a float32 wire, mccl with a 16-bit wire
(mccl.hooks.wire_allreduce_hook), mccl with the int8 wire and error feedback
(mccl.hooks.int8_allreduce_hook), Gloo, and Gloo with PyTorch's
bf16_compress_hook. Reports samples/s and the final loss (averaged over the
ranks) per configuration, the fp32 run's spread over seeds, and draws every
configuration's loss curve.
"""

from __future__ import annotations

import json
import statistics
import sys

from ..launch import LaunchError, run as launch
from .scaling import _result

CONFIGS = {
    # name: (backend, --comm-hook)
    "mccl fp32": ("mccl", "none"),
    "mccl bf16 wire": ("mccl", "wire-bf16"),
    "mccl fp16 wire": ("mccl", "wire-fp16"),
    "mccl int8 wire": ("mccl", "int8"),
    "gloo": ("gloo", "none"),
    "gloo + bf16_compress_hook": ("gloo", "bf16-compress"),
}
DEFAULT = "mccl fp32,mccl bf16 wire,mccl int8 wire,gloo,gloo + bf16_compress_hook"


def run(args) -> dict:
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in names if c not in CONFIGS]
    if bad:
        raise SystemExit(f"mccl-bench wire-train: unknown configurations {bad}; choose from {list(CONFIGS)}")
    if "mccl fp32" not in names:
        raise SystemExit("mccl-bench wire-train: the 'mccl fp32' configuration is the reference; keep it")
    seeds = [int(s) for s in args.seeds.split(",")]
    placement = {}
    if args.netlab:
        from ..netlab import lab_for
        placement = lab_for(args.netlab, args.nproc, "mccl-bench wire-train")[1]
    base = [sys.executable, "-m", "mccl.workloads.vit", "--preset", args.preset, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--batch", str(args.batch), "--quiet", "--loss-curve",
            "--threads", "1", "--bucket-mb", str(args.bucket_mb)]
    if args.emulate_ms:
        base += ["--emulate-ms", str(args.emulate_ms)]
    print(f"# mccl-bench wire-train: ViT {args.preset}, {args.nproc} ranks"
          f"{', network lab ' + args.netlab if args.netlab else ', local'}, batch {args.batch}/rank, "
          f"{args.steps} timed steps, {args.emulate_ms:g} ms emulated device time, {args.bucket_mb:g} MB buckets, "
          f"seeds {seeds}", flush=True)
    print(f"{'configuration':>27} {'seed':>4} {'samples/s':>10} {'step (ms)':>10} {'final loss':>11}", flush=True)
    runs = []
    for seed in seeds:
        for name in names:
            backend, hook = CONFIGS[name]
            cmd = base + ["--backend", backend, "--comm-hook", hook, "--seed", str(seed)]
            try:
                res = launch(cmd, args.nproc, timeout=args.timeout, env={"OMP_NUM_THREADS": "1"}, **placement)
            except LaunchError as e:
                raise SystemExit(str(e)) from None
            r = _result(res[0].output)
            r["config"] = name
            runs.append(r)
            print(f"{name:>27} {seed:>4} {r['samples_per_s']:>10.2f} {r['step_s'] * 1e3:>10.1f} "
                  f"{r['losses'][-1]:>11.4f}", flush=True)
    summary = _summary(runs, names, seeds)
    out = {"preset": args.preset, "world": args.nproc, "batch_per_rank": args.batch, "steps": args.steps,
           "emulate_ms": args.emulate_ms, "bucket_mb": args.bucket_mb, "netlab": args.netlab, "seeds": seeds,
           "summary": summary, "runs": runs}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"# wrote {args.json}", flush=True)
    if args.plot:
        _plot(out, args.plot)
        print(f"# wrote {args.plot}", flush=True)
    return out


def _summary(runs: list[dict], names: list[str], seeds: list[int]) -> dict:
    """Medians over seeds of samples/s, ratios to Gloo and to Gloo + hook,
    and each configuration's final loss against the fp32 run of the same
    seed, beside the fp32 runs' spread over seeds."""
    by = {(r["config"], r["seed"]): r for r in runs}
    fp32_final = [by[("mccl fp32", s)]["losses"][-1] for s in seeds]
    spread = max(fp32_final) - min(fp32_final) if len(seeds) > 1 else None
    print(f"\n# medians over {len(seeds)} seed(s); final loss difference against mccl fp32 with the same seed "
          f"(fp32's spread over seeds: {'-' if spread is None else f'{spread:.4f}'})", flush=True)
    print(f"{'configuration':>27} {'samples/s':>10} {'/ gloo':>7} {'/ gloo+hook':>11} {'max |dloss|':>12}",
          flush=True)
    out = {"fp32_final_loss_spread": spread}
    sps = {n: statistics.median(by[(n, s)]["samples_per_s"] for s in seeds) for n in names}
    for n in names:
        dloss = max(abs(by[(n, s)]["losses"][-1] - by[("mccl fp32", s)]["losses"][-1]) for s in seeds)
        row = {"samples_per_s": sps[n], "max_abs_final_loss_diff": dloss}
        if "gloo" in sps:
            row["vs_gloo"] = sps[n] / sps["gloo"]
        if "gloo + bf16_compress_hook" in sps:
            row["vs_gloo_hook"] = sps[n] / sps["gloo + bf16_compress_hook"]
        out[n] = row
        print(f"{n:>27} {sps[n]:>10.2f} {row.get('vs_gloo', float('nan')):>6.2f}x "
              f"{row.get('vs_gloo_hook', float('nan')):>10.2f}x {dloss:>12.4f}", flush=True)
    return out


def _plot(out: dict, path: str) -> None:
    from .plot import pyplot

    plt = pyplot()
    seeds = out["seeds"]
    fig, axes = plt.subplots(2, len(seeds), figsize=(4.2 * len(seeds), 6.4), squeeze=False, sharex=True)
    for col, seed in enumerate(seeds):
        ref = next(r["losses"] for r in out["runs"] if r["seed"] == seed and r["config"] == "mccl fp32")
        for r in out["runs"]:
            if r["seed"] != seed:
                continue
            steps = range(1, len(r["losses"]) + 1)
            width = 2.2 if r["config"] == "mccl fp32" else 1.1
            axes[0][col].plot(steps, r["losses"], label=r["config"], linewidth=width)
            axes[1][col].plot(steps, [a - b for a, b in zip(r["losses"], ref)], label=r["config"], linewidth=width)
        axes[0][col].set_title(f"seed {seed}")
        axes[0][col].set_ylabel("training loss (mean over ranks)")
        axes[1][col].set_ylabel("loss minus mccl fp32's")
        axes[1][col].set_xlabel("step")
        for a in (axes[0][col], axes[1][col]):
            a.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"ViT {out['preset']}, {out['world']} ranks: loss with each wire")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
