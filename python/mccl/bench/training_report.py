"""mccl-bench training-report (formerly scaling-report): several
`mccl-bench scaling --json` files (ViT training at several N) in one table
(and plot): runs of the same workload are grouped, and each backend's
efficiency at each N is given as the median over the repeats with its range
(and so is the step without synchronisation over the step, where the runs
measured it), beside the median of MCCL's throughput over Gloo's (each
run's ratio, so a slow repeat of one baseline does not skew another's).
Files without the one-rank run have no efficiency ("–"). (collectives-report
is the same for collective sweeps: `mccl-bench --json`.)"""

from __future__ import annotations

import json
import statistics


def label(run_file: dict) -> str:
    """What identifies a workload: the settings a repeat must share."""
    mode = "FSDP2" if run_file.get("fsdp") else f"DDP {run_file.get('bucket_mb') or 25:g} MB buckets"
    emu = f", {run_file['emulate_ms']:g} ms emulated" if run_file.get("emulate_ms") else ""
    if emu and run_file.get("emulate_queue"):
        emu += " (queued)"
    if run_file.get("optimizer", "adamw") != "adamw":
        emu += f", {run_file['optimizer']}"
    where = f", lab {run_file['netlab']}" if run_file.get("netlab") else ", local ranks"
    return (f"{mode}, ViT {run_file.get('preset')}, batch {run_file.get('batch_per_rank')}/rank"
            f"{emu}, {run_file.get('device', 'cpu')}{where}")


def summarize(files: list[dict], ref: str = "mccl", base: str = "gloo") -> list[dict]:
    """One row per (workload, N, backend): median and range of efficiency and
    step time over the repeats; rows of `ref` also carry the median per-run
    throughput ratio over `base` (None where `base` did not run)."""
    groups: dict[str, list[dict]] = {}
    for f in files:
        if not f.get("runs"):
            raise ValueError("not an `mccl-bench scaling --json` file (no runs)")
        groups.setdefault(label(f), []).append(f)
    rows = []
    for name, reps in groups.items():
        keys = sorted({(r["world"], r["backend"]) for f in reps for r in f["runs"] if r["world"] > 1})
        for n, b in keys:
            mine = [r for f in reps for r in f["runs"] if r["world"] == n and r["backend"] == b]
            # A file run without the one-rank baseline has no efficiency.
            eff = [r["efficiency"] for r in mine if r.get("efficiency") is not None]
            nosync = [r["efficiency_vs_nosync"] for r in mine if r.get("efficiency_vs_nosync") is not None]
            step = [r["step_s"] for r in mine]
            row = {"workload": name, "world": n, "backend": b, "repeats": len(mine),
                   "efficiency": statistics.median(eff) if eff else None,
                   "efficiency_min": min(eff) if eff else None, "efficiency_max": max(eff) if eff else None,
                   "vs_nosync": statistics.median(nosync) if nosync else None,
                   "vs_nosync_min": min(nosync) if nosync else None,
                   "vs_nosync_max": max(nosync) if nosync else None,
                   "step_s": statistics.median(step), "vs_base": None}
            if b == ref:
                ratios = []
                for f in reps:
                    a = [r for r in f["runs"] if r["world"] == n and r["backend"] == ref]
                    o = [r for r in f["runs"] if r["world"] == n and r["backend"] == base]
                    if a and o:
                        ratios.append(a[0]["samples_per_s"] / o[0]["samples_per_s"])
                row["vs_base"] = statistics.median(ratios) if ratios else None
            rows.append(row)
    return rows


def markdown(rows: list[dict], ref: str = "mccl", base: str = "gloo") -> str:
    """A table per workload: a row per N, each backend's median efficiency
    (range over the repeats) and median step (and, where the runs measured
    it, the median step without synchronisation over the step: "vs
    no-sync"), then ref's throughput over base's."""
    def median_range(r, key):
        if r[key] is None:
            return "–"
        return f"{100 * r[key]:.1f} % ({100 * r[key + '_min']:.1f}–{100 * r[key + '_max']:.1f})"

    out = []
    for name in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == name]
        backends = sorted({r["backend"] for r in mine}, key=lambda b: (b != ref, b != base, b))
        reps = sorted({r["repeats"] for r in mine})
        nosync = any(r.get("vs_nosync") is not None for r in mine)
        per = 3 if nosync else 2
        out += ["" if out else None, f"{name} ({'/'.join(map(str, reps))} repeats):", "",
                "| N | " + " | ".join(f"{b} efficiency (range) | {b} step" + (f" | {b} vs no-sync" if nosync else "")
                                     for b in backends)
                + f" | {ref} vs {base} |",
                "|---|" + "---|" * per * len(backends) + "---|"]
        for n in sorted({r["world"] for r in mine}):
            cells, vs = [], ""
            for b in backends:
                r = next((r for r in mine if r["world"] == n and r["backend"] == b), None)
                if r is None:
                    cells += [""] * per
                    continue
                cells += [median_range(r, "efficiency"), f"{1000 * r['step_s']:.1f} ms"]
                if nosync:
                    cells.append(median_range(r, "vs_nosync"))
                if r["vs_base"] is not None:
                    vs = f"{r['vs_base']:.2f}×"
            out.append(f"| {n} | " + " | ".join(cells) + f" | {vs} |")
    return "\n".join(x for x in out if x is not None)


def plot(rows: list[dict], path: str) -> None:
    from .plot import pyplot

    plt = pyplot()
    names = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        for b in sorted({r["backend"] for r in rows if r["workload"] == name}, key=lambda b: (b != "mccl", b)):
            sel = [r for r in rows if r["workload"] == name and r["backend"] == b and r["efficiency"] is not None]
            if not sel:
                continue  # no one-rank baseline: no efficiency to draw
            x = [1] + [r["world"] for r in sel]
            y = [100.0] + [100 * r["efficiency"] for r in sel]
            lo = [0.0] + [100 * (r["efficiency"] - r["efficiency_min"]) for r in sel]
            hi = [0.0] + [100 * (r["efficiency_max"] - r["efficiency"]) for r in sel]
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, label=b)
        ax.set_title(name.replace(", ", "\n", 2), fontsize=8)
        ax.set_xscale("log", base=2)
        ns = sorted({1} | {r["world"] for r in rows if r["workload"] == name})
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("ranks")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    axes[0][0].set_ylabel("parallel efficiency (%, median and range)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run(args) -> list[dict]:
    files = []
    for p in args.files:
        with open(p) as f:
            files.append(json.load(f))
    try:
        rows = summarize(files)
    except ValueError as e:
        raise SystemExit(f"mccl-bench training-report: {e}") from None
    print(markdown(rows), flush=True)
    if args.plot:
        plot(rows, args.plot)
        print(f"# wrote {args.plot}", flush=True)
    return rows
