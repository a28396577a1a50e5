"""One rank of ``mccl selftest`` (started by mccl.launch; see __init__.py)."""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta

import torch
import torch.distributed as dist

import mccl  # noqa: F401  registers the backend (and the MPS shims on macOS)
from .checks import Checks, collective_checks, stream_order_checks
from .training import busbw, training_checks

MARK = "MCCL-SELFTEST "


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("mccl", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    c = Checks(rank, world, dev, breaks=os.environ.get("MCCL_SELFTEST_BREAK", ""))
    collective_checks(c, a.quick)
    stream_order_checks(c)
    training_checks(c)
    speeds = []
    try:
        speeds = busbw(dev, world, [1 << 20] if a.quick else [1 << 20, 16 << 20])
    except Exception as e:  # noqa: BLE001
        c.results.append({"check": "busbw", "ok": False, "detail": f"{type(e).__name__}: {e}"})
    port = mccl._C._mps_port_stats()  # None without MPS (or the fake Metal port)
    print(MARK + json.dumps({"rank": rank, "results": c.results, "busbw": speeds, "metal_port": port}),
          flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
