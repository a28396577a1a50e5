"""Registration of backend "mccl" with torch.distributed."""

from __future__ import annotations

import os

import torch
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
    route = getattr(s, "route_host", None)  # mccl.elastic's EtcdStore: a host of the cluster
    if isinstance(route, str) and route:
        return route
    return os.environ.get("MASTER_ADDR", "")


def _create_backend(dist_backend_opts, backend_options):
    """Creator for ``Backend.register_backend(..., extended_api=True)``;
    ``backend_options`` is the group's ``pg_options``: None or mccl.Options."""
    from .options import Options
    if backend_options is not None and not isinstance(backend_options, Options):
        raise TypeError(f"pg_options for backend 'mccl' must be mccl.Options, not "
                        f"{type(backend_options).__name__} (other settings come from MCCL_* variables)")
    store = dist_backend_opts.store
    return _C.ProcessGroupMCCL(
        store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        dist_backend_opts.timeout,
        dist_backend_opts.group_id or "",
        _route_host(store),
        backend_options.settings() if backend_options is not None else {},
    )


def _hook_shutdown() -> None:
    """torch < 2.7: c10d::Backend has no virtual shutdown(), and
    destroy_process_group shuts down NCCL backends only (through
    ``_shutdown_backend``); MCCL's threads and sockets would then live until
    the last reference to the group goes. Extend that hook to MCCL."""
    c10d = dist.distributed_c10d
    original = getattr(c10d, "_shutdown_backend", None)
    if original is None or getattr(original, "_mccl", False):
        return

    def _shutdown_backend(pg):
        original(pg)
        try:
            backend = pg._get_backend(torch.device("cpu"))
        except RuntimeError:
            return
        if isinstance(backend, _C.ProcessGroupMCCL):
            backend._shutdown()

    _shutdown_backend._mccl = True
    c10d._shutdown_backend = _shutdown_backend


def _install_shrink_fix() -> None:
    """torch's shrink_group (2.10+) registers the shrunk group's backend as
    GLOO (NCCL on CUDA) whatever the plugin; DDP's logger then takes mccl for
    Gloo and casts it to ProcessGroupGloo (a crash in DDP's constructor).
    For an mccl backend, register it as a plugin is registered (CUSTOM, on
    every device it serves), as init_process_group and new_group do."""
    c10d = dist.distributed_c10d
    create = getattr(c10d, "_create_shrunk_process_group", None)
    if create is None or getattr(create, "_mccl", False):
        return

    def create_shrunk(new_backend, *args, **kwargs):
        pg = create(new_backend, *args, **kwargs)
        if isinstance(new_backend, _C.ProcessGroupMCCL):
            custom = dist.ProcessGroup.BackendType.CUSTOM
            for device in DEVICES:
                pg._register_backend(torch.device(device), custom, new_backend)
            pg._set_default_backend(custom)
        return pg

    create_shrunk._mccl = True
    c10d._create_shrunk_process_group = create_shrunk


def register() -> None:
    """Registers backend "mccl" (idempotent); ``import mccl`` calls it."""
    if torch.torch_version.TorchVersion(torch.__version__) < (2, 7):
        _hook_shutdown()
    if "mccl" in dist.Backend.backend_list and "MCCL" in getattr(dist.Backend, "_plugins", {}):
        _install_shrink_fix()
        return
    dist.Backend.register_backend("mccl", _create_backend, extended_api=True, devices=list(DEVICES))
    _install_shrink_fix()
