"""Markdown tables from mccl-bench --json files (for docs/benchmarks.md).

    python -m mccl.bench.report results.json [more.json ...]
"""

from __future__ import annotations

import json
import sys

from .common import fmt_size


def table(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    rows = data["results"]
    backends = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    goodput = any("goodput_GBps" in r for r in rows)
    head = ["op", "size"]
    for b in backends:
        head += [f"{b} time (µs)", f"{b} busbw (GB/s)"] + ([f"{b} % goodput"] if goodput else [])
    if len(backends) == 2:
        head.append(f"busbw {backends[0]}/{backends[1]}")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["op"], fmt_size(r["bytes"])]
        for b in backends:
            cells += [f"{r[b]['time_us']:.1f}", f"{r[b]['busbw_GBps']:.3f}"]
            if goodput:
                cells.append(f"{100 * r[b]['busbw_GBps'] / r['goodput_GBps']:.1f} %")
        if len(backends) == 2:
            cells.append(f"{r[backends[0]]['busbw_GBps'] / max(r[backends[1]]['busbw_GBps'], 1e-12):.2f}×"
                         if r["bytes"] >= 1024 else
                         f"{r[backends[1]]['time_us'] / max(r[backends[0]]['time_us'], 1e-9):.2f}× faster")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    for p in (argv if argv is not None else sys.argv[1:]):
        print(table(p))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
