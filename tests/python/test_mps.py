"""The MPS path, tested on Linux (no Mac here): MCCL's boxed c10d kernels
through test namespaces holding the schemas of torch 2.5, 2.7 and this
torch, and the MPS device adapter's ordering through a fake Metal port."""

import torch

import mccl
from conftest import run_workers


def test_mps_kernels_registered_for_every_op():
    # c10d has no MPS kernels of its own; MCCL registers one per op it serves.
    names = mccl._C._mps_kernels()
    assert "allreduce_" in names and "send" in names and "barrier" in names
    for name in names:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"c10d::{name}", "MPS"), name
    assert "monitored_barrier_" not in names  # Gloo-only; not served


def test_boxed_kernels_serve_three_schema_versions():
    outs = run_workers("boxed_ops.py", 3, timeout=240)
    for v in ("v25", "v27", "now"):
        assert f"{v}: " in outs[0], outs[0]
