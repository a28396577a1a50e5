"""mccl-bench scaling: the ViT workload at N = 1, 2, 4 (...) ranks, for MCCL
and Gloo: samples/s, parallel efficiency (throughput at N over N times the
throughput at 1) and the share of the gradient all-reduce hidden behind
backward. Ranks are local processes, or network-lab hosts with --netlab.

With DDP the N ranks also run the same steps without synchronising their
gradients (DDP's no_sync); "vs no-sync" is that step over the synchronised
one, both the slowest rank's. Where the ranks share a machine's cores (a
network lab), the N-rank step slows down without any communication as well;
this column leaves that out and keeps what synchronisation costs.

The JSON it writes is what `mccl plan --scaling` reads."""

from __future__ import annotations

import json
import os
import sys

from ..launch import LaunchError, run as launch


def _result(output: str) -> dict:
    for line in output.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError("the workload printed no RESULT line:\n" + output[-2000:])


def run(args) -> dict:
    ns = [int(x) for x in args.ns.split(",")]
    backends = [b for b in args.backends.split(",") if b]
    base = [sys.executable, "-m", "mccl.workloads.vit", "--preset", args.preset, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--batch", str(args.batch), "--device", args.device, "--quiet"]
    if args.threads:
        base += ["--threads", str(args.threads)]
    if args.bf16:
        base.append("--bf16")
    if args.emulate_ms:
        base += ["--emulate-ms", str(args.emulate_ms)]
    if args.emulate_queue:
        base.append("--emulate-queue")
    if args.optimizer != "adamw":
        base += ["--optimizer", args.optimizer]
    if args.bucket_mb:
        base += ["--bucket-mb", str(args.bucket_mb)]
    if args.fsdp:
        base.append("--fsdp")
    env = {"OMP_NUM_THREADS": str(args.threads or 1)}
    placement, link_gbit = {}, args.link_gbit
    if args.netlab:
        from ..netlab import lab_for
        lab, placement = lab_for(args.netlab, max(ns), "mccl-bench scaling")
        if not link_gbit and lab.goodput:
            link_gbit = 8 * lab.goodput["min_GBps"]  # the ring's ceiling, `mccl netlab goodput`
    tail = args.trace_buckets and not args.fsdp
    if tail:
        base.append("--trace-buckets")
        if link_gbit:
            base += ["--link-gbit", f"{link_gbit:.6g}"]
    runs = []
    print(f"# mccl-bench scaling: ViT preset {args.preset}, batch {args.batch}/rank, {args.steps} timed steps, "
          f"device {args.device}{', network lab ' + args.netlab if args.netlab else ', local ranks'}"
          f"{f', {args.emulate_ms:g} ms emulated device time per step' if args.emulate_ms else ''}"
          f"{' (queued: host work overlapped)' if args.emulate_queue else ''}"
          f"{', fused AdamW' if args.optimizer == 'adamw-fused' else ''}"
          f"{', FSDP2 (no hidden share: its all-gathers cannot be skipped)' if args.fsdp else ', DDP'}", flush=True)
    print(f"{'backend':>8} {'N':>3} {'samples/s':>10} {'step (ms)':>10} {'efficiency':>11} {'vs no-sync':>11}"
          f" {'hidden':>7}"
          + (f" {'tail (ms)':>10} {'over floor':>10} {'skew':>6}" if tail else ""), flush=True)
    one = None
    for n in ns:
        for b in (["none"] if n == 1 else backends):
            cmd = base + ([] if n == 1 else ["--backend", b] + ([] if args.fsdp else ["--measure-overlap"]))
            try:
                res = launch(cmd, n, timeout=args.timeout, env=env, **placement)
            except LaunchError as e:
                raise SystemExit(str(e)) from None
            r = _result(res[0].output)
            if n == 1:
                one = r
            r["efficiency"] = r["samples_per_s"] / (n * one["samples_per_s"]) if one else None
            if r.get("step_nosync_s"):
                r["efficiency_vs_nosync"] = r["step_nosync_s"] / r["step_s"]
            runs.append(r)
            hidden = f"{100 * r['hidden_share']:.0f}%" if "hidden_share" in r else "-"
            eff = f"{100 * r['efficiency']:.1f}%" if r["efficiency"] is not None else "-"
            vs = f"{100 * r['efficiency_vs_nosync']:.1f}%" if "efficiency_vs_nosync" in r else "-"
            bt = r.get("bucket_trace", {})
            tail_ms = f"{bt['tail_ms']:.1f}" if bt else "-"
            # over the link floor, every rank's hand-overs counted (rank 0's alone on one rank)
            over = bt.get("over_floor_all_ranks_ms", bt.get("over_floor_ms"))
            over = f"{over:.1f}" if over is not None else "-"
            skew = f"{bt['skew_ms']:.1f}" if "skew_ms" in bt else "-"
            print(f"{r['backend']:>8} {n:>3} {r['samples_per_s']:>10.1f} {r['step_s'] * 1000:>10.1f} "
                  f"{eff:>11} {vs:>11} {hidden:>7}" + (f" {tail_ms:>10} {over:>10} {skew:>6}" if tail else ""),
                  flush=True)
    out = {"preset": args.preset, "batch_per_rank": args.batch, "device": args.device,
           "emulate_ms": args.emulate_ms, "emulate_queue": bool(args.emulate_queue),
           "optimizer": args.optimizer, "bucket_mb": args.bucket_mb,
           "fsdp": bool(args.fsdp),
           "netlab": args.netlab, "runs": runs}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"# wrote {args.json}", flush=True)
    if args.plot:
        _plot(out, args.plot)
        print(f"# wrote {args.plot}", flush=True)
    return out


def _plot(out: dict, path: str) -> None:
    from .plot import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6))
    for b in sorted({r["backend"] for r in out["runs"] if r["world"] > 1}):
        rows = [r for r in out["runs"] if r["backend"] == b or r["world"] == 1]
        ax[0].plot([r["world"] for r in rows], [r["samples_per_s"] for r in rows], marker="o", label=b)
        ax[1].plot([r["world"] for r in rows], [100 * r["efficiency"] for r in rows], marker="o", label=b)
    ax[0].set_xlabel("ranks")
    ax[0].set_ylabel("samples/s")
    ax[1].set_xlabel("ranks")
    ax[1].set_ylabel("parallel efficiency (%)")
    for a in ax:
        a.grid(True, alpha=0.3)
        a.legend()
    fig.suptitle(f"ViT {out['preset']}, batch {out['batch_per_rank']}/rank")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
