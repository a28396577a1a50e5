"""Registration of backend "mccl" with torch.distributed."""

from __future__ import annotations

import os

import torch.distributed as dist

from . import _C

DEVICES = ["cpu", "cuda", "mps"]


def _route_host(store) -> str:
    """The master (rendezvous) host: MCCL listens on the interface that routes there."""
    s = store
    while isinstance(s, dist.PrefixStore):
        s = s.underlying_store
    if isinstance(s, dist.TCPStore):
        return s.host
    return os.environ.get("MASTER_ADDR", "")


def _create_backend(dist_backend_opts, backend_options):
    """Creator for ``Backend.register_backend(..., extended_api=True)``."""
    del backend_options  # no backend-specific options yet; settings come from MCCL_*
    store = dist_backend_opts.store
    return _C.ProcessGroupMCCL(
        store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        dist_backend_opts.timeout,
        dist_backend_opts.group_id or "",
        _route_host(store),
    )


def register() -> None:
    """Registers backend "mccl" (idempotent); ``import mccl`` calls it."""
    if "mccl" in dist.Backend.backend_list and "MCCL" in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend("mccl", _create_backend, extended_api=True, devices=list(DEVICES))
