"""MCCL: collectives over switched TCP for torch.distributed.

``import mccl`` registers the ``"mccl"`` backend::

    import torch.distributed as dist
    import mccl  # noqa: F401
    dist.init_process_group("mccl")

Settings are read from ``MCCL_*`` environment variables when a group is
created; ``mccl.params()`` lists them with their defaults. A group may choose
some for itself: ``pg_options=mccl.Options(wire_dtype="bf16")``.
"""

import torch  # (loads libtorch before the extension)

from . import _torch_check
from ._version import __version__

try:  # written at build time: the torch this mccl was compiled against
    from . import _build_info
except ImportError:  # a source tree that was never built records nothing
    _build_info = None

__build_torch__ = _build_info.TORCH_VERSION if _build_info else None
# A wheel built for another torch release fails here, saying what to install,
# before its extension fails with "undefined symbol".
_mismatch = _torch_check.mismatch_message(__build_torch__, torch.__version__)
if _mismatch:
    raise ImportError(_mismatch)
try:
    from . import _C
except ImportError as _e:
    raise ImportError(_torch_check.load_failure_message(__build_torch__, torch.__version__, _e)) from _e

from . import _mps  # noqa: E402
from ._backend import register  # noqa: E402
from .options import Options  # noqa: E402

__all__ = ["Options", "build_info", "params", "register", "reduce_supported", "__build_torch__",
           "__version__"]


def build_info() -> dict:
    """What this mccl was compiled against: torch (with its local tag, e.g.
    ``2.13.0+cpu``), its CUDA, the C++ ABI, platform, Python and compiler;
    empty where the build wrote no record (a source tree used in place)."""
    if _build_info is None:
        return {}
    return {"mccl": _build_info.MCCL_VERSION or __version__, "torch": _build_info.TORCH_VERSION,
            "torch_cuda": _build_info.TORCH_CUDA or None, "cxx11_abi": _build_info.CXX11_ABI,
            "platform": _build_info.PLATFORM, "python": _build_info.PYTHON,
            "compiler": _build_info.COMPILER}


def params():
    """Every MCCL_* setting as a list of dicts: name, type, default, doc."""
    return _C.params()


def reduce_supported(dtype: str, op: str) -> bool:
    """Whether reduce op ``op`` (e.g. ``"SUM"``) applies to ``dtype`` (e.g. ``"float32"``)."""
    return _C.reduce_supported(dtype, op)


register()
_mps.install()
