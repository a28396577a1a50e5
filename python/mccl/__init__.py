"""MCCL: collectives over switched TCP for torch.distributed.

``import mccl`` registers the ``"mccl"`` backend::

    import torch.distributed as dist
    import mccl  # noqa: F401
    dist.init_process_group("mccl")

Settings are read from ``MCCL_*`` environment variables when a group is
created; ``mccl.params()`` lists them with their defaults. A group may choose
some for itself: ``pg_options=mccl.Options(wire_dtype="bf16")``.
"""

import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C, _mps
from ._backend import register
from .options import Options

__version__ = "0.1.0"
__all__ = ["Options", "params", "register", "reduce_supported", "__version__"]


def params():
    """Every MCCL_* setting as a list of dicts: name, type, default, doc."""
    return _C.params()


def reduce_supported(dtype: str, op: str) -> bool:
    """Whether reduce op ``op`` (e.g. ``"SUM"``) applies to ``dtype`` (e.g. ``"float32"``)."""
    return _C.reduce_supported(dtype, op)


register()
_mps.install()
