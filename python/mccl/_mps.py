"""What FSDP2 needs on MPS that PyTorch does not provide.

- FSDP2's custom ops (``fsdp::all_gather_copy_in``, ``split_with_sizes_copy``,
  ``chunk_cat``, ``copy_``) have kernels for CPU, CUDA, XPU, ... but not MPS.
  Their CPU implementations are plain tensor code that runs on any device, so
  they are registered for MPS as well.
- FSDP2 asks the device module (``torch.mps``) for ``Stream``,
  ``current_stream``, ``stream`` and ``current_device``, which torch.mps lacks
  (up to 2.13). MPS has one stream, in order, so the shim's streams are that
  one stream: waits between them are satisfied by order (a wait for anything
  else is refused), and events are torch.mps events. A torch.mps with any
  stream API of its own gets none of the shim's.

``import mccl`` applies both where torch is built with MPS (macOS); tests on
Linux call them directly.
"""

from __future__ import annotations

import contextlib
import importlib

import torch

# FSDP2's package: torch.distributed.fsdp._fully_shard since torch 2.6,
# torch.distributed._composable.fsdp in 2.5.
_FSDP_PACKAGES = ("torch.distributed.fsdp._fully_shard", "torch.distributed._composable.fsdp")
# (module, function) of FSDP2's CPU implementation of each op, by op name
# (torch 2.5 has set_ where later ones have copy_).
_FSDP_OPS = {
    "all_gather_copy_in": ("_fsdp_collectives", "all_gather_copy_in_cuda"),
    "split_with_sizes_copy": ("_fsdp_collectives", "split_with_sizes_copy"),
    "chunk_cat": ("_fsdp_collectives", "chunk_cat"),
    "copy_": ("_fsdp_param", "copy_"),
    "set_": ("_fsdp_param", "set_"),
}


def _fsdp_function(module: str, name: str):
    for package in _FSDP_PACKAGES:
        try:
            return getattr(importlib.import_module(f"{package}.{module}"), name, None)
        except ImportError:
            continue
    return None


_libs: list = []


def install_fsdp_kernels(dispatch_key: str = "MPS") -> list[str]:
    """Registers FSDP2's own implementations of its ops for ``dispatch_key``
    where it has none; returns the op names registered."""
    done = []
    lib = None
    for op, (module, fn_name) in _FSDP_OPS.items():
        fn = _fsdp_function(module, fn_name)
        if fn is None:
            continue  # a torch without FSDP2, or one that renamed it
        if not hasattr(torch.ops.fsdp, op):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(f"fsdp::{op}", dispatch_key):
            continue
        if lib is None:
            lib = torch.library.Library("fsdp", "IMPL", dispatch_key)
            _libs.append(lib)
        lib.impl(op, fn)
        done.append(op)
    return done


class _OneStream:
    """MPS's single in-order stream, as FSDP2 uses a CUDA stream; events and
    synchronize come from ``module`` (torch.mps).

    The assumption: torch (up to 2.13, at least) runs all MPS work on one
    in-order stream (``MPSStreamImpl::getInstance()``; ``getNewStream`` hands
    back the default stream), so a wait between two handles of it, or on an
    event recorded on it, is already satisfied by order. Anything else
    passed in is refused rather than silently not waited for."""

    def __init__(self, module, priority: int = 0):
        self.module = module
        self.device = torch.device("mps")
        self.priority = priority

    def wait_stream(self, other) -> None:
        if not isinstance(other, _OneStream):
            raise TypeError(f"mccl's torch.mps stream shim has one in-order stream; cannot wait "
                            f"for {other!r} (a stream of another device or of a torch with MPS streams)")

    def wait_event(self, event) -> None:
        if not isinstance(event, self.module.Event):
            raise TypeError(f"mccl's torch.mps stream shim waits only for torch.mps events (recorded "
                            f"on the one MPS stream); got {type(event).__name__}")

    def record_event(self, event=None):
        event = event if event is not None else self.module.Event()
        event.record()
        return event

    def synchronize(self) -> None:
        self.module.synchronize()

    def query(self) -> bool:
        """Whether everything queued on the stream so far has run."""
        event = self.module.Event()
        event.record()
        query = getattr(event, "query", None)
        if query is None:  # an Event without query(): wait instead of guessing
            self.module.synchronize()
            return True
        return bool(query())

    def __eq__(self, other) -> bool:
        return isinstance(other, _OneStream)

    def __hash__(self) -> int:
        return 0


_STREAM_API = ("Stream", "current_stream", "default_stream", "stream")


def install_stream_shim(module=None) -> list[str]:
    """Adds the stream API FSDP2 uses to ``module`` (default ``torch.mps``)
    where it is missing; returns the names added. A torch whose torch.mps
    has any stream API of its own gets none of the shim's (it may have more
    than one stream, which the shim's no-op waits would not order)."""
    module = module if module is not None else torch.mps
    one = _OneStream(module)
    shims = {
        "Stream": lambda device=None, priority=0, **_: _OneStream(module, priority),
        "current_stream": lambda device=None: one,
        "default_stream": lambda device=None: one,
        "stream": lambda s=None: contextlib.nullcontext(s),
        "current_device": lambda: 0,
        "set_device": lambda device: None,
    }
    native_streams = any(hasattr(module, name) for name in _STREAM_API)
    added = []
    for name, value in shims.items():
        if name in _STREAM_API and native_streams:
            continue
        if not hasattr(module, name):
            setattr(module, name, value)
            added.append(name)
    return added


def install() -> None:
    """What ``import mccl`` does on builds of torch with MPS."""
    if torch.backends.mps.is_built():
        install_stream_shim()
        # FSDP2's ops exist once its modules are imported; importing them here
        # costs little next to a training job.
        install_fsdp_kernels("MPS")
