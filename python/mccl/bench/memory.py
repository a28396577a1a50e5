"""Peak resident memory of a rank running one large all_reduce.

The figure is the rise of the process's peak RSS (VmHWM, reset just before)
above its RSS before the tensor existed, minus the tensor itself: what MCCL
adds on top of the caller's data.
"""

from __future__ import annotations

import os
import resource
import sys

import torch
import torch.distributed as dist

from .common import fmt_size, metadata, parse_size, write_json


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def _rss() -> int:
    kib = _status_kib("VmRSS")
    if kib is None:  # macOS: ru_maxrss is in bytes there
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def _peak() -> int:
    kib = _status_kib("VmHWM")
    if kib is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


def run(args) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    nbytes = parse_size(args.size)
    # Warm up: connections, threads and scratch pools exist before measuring.
    w = torch.ones(1 << 20)
    dist.all_reduce(w)
    del w
    exact = _reset_peak()
    base = _rss()
    x = torch.ones(nbytes // 4)
    dist.all_reduce(x)
    peak = _peak()
    extra = peak - base - nbytes
    ok = bool(torch.all(x == world).item())
    row = torch.tensor([float(extra), float(peak - base)], dtype=torch.float64)
    rows = [torch.zeros_like(row) for _ in range(world)]
    dist.all_gather(rows, row)
    result = {"bytes": nbytes, "world": world, "exact_peak": exact,
              "extra_bytes": [int(r[0]) for r in rows], "rise_bytes": [int(r[1]) for r in rows]}
    if rank == 0:
        print(f"# one all_reduce of {fmt_size(nbytes)} on {world} ranks "
              f"({'VmHWM reset before' if exact else 'ru_maxrss, not resettable: an upper bound'})")
        print(f"{'rank':>5} {'peak rise (MiB)':>16} {'beyond tensor (MiB)':>20}")
        for r, (ex, rise) in enumerate(zip(result["extra_bytes"], result["rise_bytes"])):
            print(f"{r:>5} {rise / 2**20:>16.1f} {ex / 2**20:>20.1f}")
        worst = max(result["extra_bytes"]) / 2**20
        print(f"# worst rank: tensor + {worst:.1f} MiB; result {'correct' if ok else 'WRONG'}")
        if args.json:
            write_json(args.json, metadata({"mode": "memory"}), [result])
    if not ok:
        print(f"rank {rank}: all_reduce result is wrong", file=sys.stderr)
        raise SystemExit(1)
    return result
