"""Shared helpers: run a worker script as N ranks with a deadline.

Every multi-process test goes through ``run_workers``: all ranks run under
mccl.launch, which kills every rank when one fails or the deadline passes,
and the test fails with each rank's output.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from mccl.launch import LaunchError, run

WORKERS = Path(__file__).parent / "workers"

# FSDP2 in torch 2.5 (torch.distributed._composable.fsdp) insists on CUDA
# streams ("FSDP requires CUDA for streams"); CPU tensors need torch >= 2.6.
needs_cpu_fsdp2 = pytest.mark.skipif(
    torch.torch_version.TorchVersion(torch.__version__) < (2, 6),
    reason="FSDP2 on CPU tensors needs torch >= 2.6 (torch 2.5's FSDP2 runs on CUDA only)")


def run_workers(script: str, world: int, *args: str, timeout: float = 240.0,
                env: dict[str, str] | None = None,
                expect_exit: dict[int, int] | None = None, lab=None) -> list[str]:
    """Runs workers/<script> on ``world`` ranks; returns each rank's output.
    With ``lab`` (a mccl.netlab.Lab), rank r runs on lab host r."""
    cmd = [sys.executable, str(WORKERS / script), *args]
    e = {"PYTHONPATH": str(WORKERS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
         "OMP_NUM_THREADS": "1"}
    e.update(env or {})
    try:
        results = run(cmd, world, timeout=timeout, env=e, expect_exit=expect_exit,
                      **(lab.launch_options(world) if lab else {}))
    except LaunchError as err:
        pytest.fail(str(err), pytrace=False)
    outs = [r.output for r in results]
    for rank, out in enumerate(outs):
        if expect_exit and rank in expect_exit:
            continue
        assert "WORKER OK" in out, f"rank {rank} did not report success:\n{out[-4000:]}"
    return outs

