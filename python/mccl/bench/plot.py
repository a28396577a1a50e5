"""Plots of a collective sweep: busbw and latency against size, per op."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot drawing to files (Agg); a clear exit where
    matplotlib, an optional dependency, is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit("--plot needs matplotlib: pip install matplotlib") from e
    return plt


def plot(records: list[dict], path: str, title: str = "") -> None:
    plt = pyplot()
    ops = list(dict.fromkeys(r["op"] for r in records))
    backends = [k for k in records[0] if isinstance(records[0][k], dict)]
    fig, axes = plt.subplots(2, len(ops), figsize=(3.6 * len(ops), 6.4), squeeze=False)
    for j, op in enumerate(ops):
        rows = [r for r in records if r["op"] == op]
        x = [r["bytes"] for r in rows]
        for b in backends:
            axes[0][j].plot(x, [r[b]["busbw_GBps"] for r in rows], marker="o", ms=3, label=b)
            axes[1][j].plot(x, [r[b]["time_us"] for r in rows], marker="o", ms=3, label=b)
        axes[0][j].set_title(op)
        for i in range(2):
            axes[i][j].set_xscale("log", base=2)
            axes[i][j].grid(True, alpha=0.3)
        axes[1][j].set_yscale("log")
        axes[1][j].set_xlabel("bytes")
    axes[0][0].set_ylabel("busbw (GB/s)")
    axes[1][0].set_ylabel("time (us)")
    axes[0][0].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
