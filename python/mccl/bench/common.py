"""Shared pieces of mccl-bench: sizes, busbw factors, timing, tables."""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import sys
import time

import torch
import torch.distributed as dist

# nccl-tests conventions: algbw = size / time; busbw = algbw * factor(n).
# For all_gather, reduce_scatter and all_to_all, size is the full buffer.
BUSBW = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
OPS = list(BUSBW)

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"bad size {text!r} (examples: 8, 64K, 4M, 1G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def fmt_size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def median(xs):
    return statistics.median(xs) if xs else float("nan")


CONGESTION_FILE = "/proc/sys/net/ipv4/tcp_congestion_control"


def tcp_congestion() -> str | None:
    """This host's (network namespace's) default TCP congestion control, or
    None where Linux does not say. MCCL_TCP_CONGESTION, recorded with the
    other settings, overrides it for MCCL's own connections."""
    try:
        with open(CONGESTION_FILE) as f:
            return f.read().strip() or None
    except OSError:
        return None


def metadata(extra: dict | None = None) -> dict:
    import mccl

    meta = {
        "mccl": mccl.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "world": dist.get_world_size() if dist.is_initialized() else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "env": {k: v for k, v in os.environ.items() if k.startswith("MCCL_")},
        "tcp_congestion": tcp_congestion(),
    }
    meta.update(extra or {})
    return meta


def write_json(path: str, meta: dict, records: list[dict]) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": records}, f, indent=1)


class Progress:
    """Progress on stderr: a bar on a terminal, sparse lines otherwise."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.done, self.enabled = total, 0, enabled
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def step(self, label: str):
        self.done += 1
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            w = 28
            k = int(w * self.done / max(1, self.total))
            sys.stderr.write(f"\r[{'#' * k}{'-' * (w - k)}] {self.done}/{self.total} {label:<40}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif now - self.last > 10 or self.done == self.total:
            print(f"[{self.done}/{self.total}] {label}", file=sys.stderr, flush=True)
            self.last = now


def destroy_gloo(group) -> None:
    """Destroys a Gloo group of the comparison runs. torch < 2.8 frees a Gloo
    group holding the GIL, while Gloo's worker may still need the GIL to free
    a finished work's tensors: a deadlock at exit in about half the runs on
    torch 2.5 (pytorch/pytorch#154976). Let the workers drain first, with the
    GIL released."""
    dist.barrier(group=group)
    time.sleep(0.2)
    dist.destroy_process_group(group)
