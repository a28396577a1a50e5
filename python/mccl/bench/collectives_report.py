"""mccl-bench collectives-report (formerly scale-report): collective sweeps
(`mccl-bench --json`) at several world sizes in one table and plot: per op
and size, MCCL's and Gloo's busbw at each N as % of the links' TCP goodput,
and latency where the size is latency-bound. The goodput is the one each
run measured (the lab's slowest ring link, MCCL_BENCH_GOODPUT_GBPS in the
file) unless --goodput gives one for every file. (training-report is the
same for training runs: `mccl-bench scaling --json`.)"""

from __future__ import annotations

import json
import statistics

BACKENDS = ("mccl", "gloo")
LATENCY_BYTES = 64 << 10  # at most this: latency-bound, shown in µs


def goodput_of(run_file: dict, override: float | None) -> float | None:
    if override:
        return override
    value = run_file.get("meta", {}).get("env", {}).get("MCCL_BENCH_GOODPUT_GBPS")
    return float(value) if value else None


# Settings that do not change what is measured; any other MCCL_* setting a
# file was run with keeps its rows apart from the default's.
NEUTRAL_ENV = {"MCCL_SOCKET_IFNAME", "MCCL_BENCH_GOODPUT_GBPS"}


def settings_of(run_file: dict) -> str:
    env = run_file.get("meta", {}).get("env", {})
    return " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("MCCL_") and k not in NEUTRAL_ENV)


def summarize(files: list[dict], goodput: float | None = None) -> list[dict]:
    """One row per (op, bytes, world, settings): each backend's median time
    and busbw over the files that measured it, and the median over those
    files of busbw / that file's goodput where the goodput is known. Files
    run with other MCCL_* settings (a forced MCCL_ALGO, more connections...)
    make rows of their own."""
    cells: dict[tuple, dict[str, list]] = {}
    for f in files:
        if "results" not in f or "meta" not in f:
            raise ValueError("not an `mccl-bench --json` sweep (no meta and results)")
        g = goodput_of(f, goodput)
        for r in f["results"]:
            key = (r["op"], r["bytes"], r["world"], settings_of(f))
            cell = cells.setdefault(key, {b: [] for b in BACKENDS} | {"goodput": []})
            for b in BACKENDS:
                if r.get(b):
                    bw = r[b]["busbw_GBps"]
                    cell[b].append((r[b]["time_us"], bw, bw / g if g else None))
            if g:
                cell["goodput"].append(g)
    rows = []
    for (op, size, world, settings), cell in sorted(cells.items()):
        row = {"op": op, "bytes": size, "world": world, "settings": settings,
               "goodput_GBps": statistics.median(cell["goodput"]) if cell["goodput"] else None}
        for b in BACKENDS:
            got = cell[b]
            row[b] = None if not got else {
                "runs": len(got),
                "time_us": statistics.median(t for t, _, _ in got),
                "busbw_GBps": statistics.median(bw for _, bw, _ in got),
            }
            ratios = [x for _, _, x in got if x is not None]
            if row[b] and ratios:
                row[b]["of_goodput"] = statistics.median(ratios)
        rows.append(row)
    return rows


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _cell(row: dict, b: str) -> str:
    v = row[b]
    if v is None:
        return "–"
    if row["bytes"] <= LATENCY_BYTES:
        return f"{v['time_us']:,.0f} µs"
    pct = f", {v['of_goodput'] * 100:.1f} %" if "of_goodput" in v else ""
    return f"{v['busbw_GBps']:.3f} GB/s{pct}"


def table(rows: list[dict]) -> str:
    lines = ["| op | size | N | settings | MCCL | Gloo | MCCL / Gloo |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "–"
        if r["mccl"] and r["gloo"]:
            ratio = f"{r['gloo']['time_us'] / r['mccl']['time_us']:.2f}×"
        lines.append(f"| {r['op']} | {_size(r['bytes'])} | {r['world']} | {r['settings'] or 'default'} | "
                     f"{_cell(r, 'mccl')} | {_cell(r, 'gloo')} | {ratio} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """One panel per op: % of goodput (or µs, for latency-bound sizes)
    against N, a line per size; MCCL solid, Gloo dashed. Only the default
    settings' rows (what a user gets)."""
    from .plot import pyplot

    plt = pyplot()
    rows = [r for r in rows if not r["settings"]]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 3.8), squeeze=False)
    for ax, op in zip(axes[0], ops):
        mine = [r for r in rows if r["op"] == op]
        large = [r for r in mine if r["bytes"] > LATENCY_BYTES]
        for k, size in enumerate(sorted({r["bytes"] for r in large})):
            pts = sorted((r for r in large if r["bytes"] == size), key=lambda r: r["world"])
            color = f"C{k}"
            for b, style in (("mccl", "-"), ("gloo", "--")):
                xy = [(r["world"], 100 * r[b]["of_goodput"]) for r in pts if r[b] and "of_goodput" in r[b]]
                if xy:
                    ax.plot(*zip(*xy), style, marker="o", ms=3, color=color,
                            label=f"{b} {_size(size)}")
        ax.set_title(op)
        ax.set_xlabel("hosts")
        ax.set_ylim(0, 110)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("busbw, % of TCP goodput")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args) -> None:
    files = []
    for path in args.files:
        try:
            with open(path) as fh:
                f = json.load(fh)
            summarize([f])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"mccl-bench collectives-report: {path}: {e}") from None
        files.append(f)
    rows = summarize(files, args.goodput)
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)
        print(f"# wrote {args.plot}")
