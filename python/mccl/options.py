"""``mccl.Options``: settings one process group chooses for itself, passed as
``pg_options`` to ``init_process_group`` or ``new_group``::

    fast = dist.new_group(backend="mccl", pg_options=mccl.Options(wire_dtype="bf16"))

Everything not given here comes from the ``MCCL_*`` environment, as for any
group. Every rank of the group must pass the same values (they are agreed at
creation like the environment's wire settings, and a rank that differs is
refused, naming the setting).
"""

from __future__ import annotations

WIRE_DTYPES = ("fp32", "bf16", "fp16", "int8")
WIRE_REDUCES = ("auto", "ring", "pairwise")


class Options:
    """A group's own settings.

    wire_dtype: ``"fp32"``, ``"bf16"``, ``"fp16"`` or ``"int8"``: the dtype
        float32 and float64 SUM and AVG all_reduce and reduce_scatter send
        their data in
        (``MCCL_WIRE_DTYPE``; int8: one byte per value and a float32 scale
        per 256, always by pairwise exchange; see mccl.hooks.Int8State).
    wire_dtype_min_bytes: ops smaller than this keep float32 on the wire
        (``MCCL_WIRE_DTYPE_MIN_BYTES``; an int, or text such as ``"256K"``).
    wire_reduce: ``"ring"`` (fastest; the error grows with the group like
        ``bf16_compress_hook``'s), ``"pairwise"`` (each input rounded once: an
        error flat in the group's size) or ``"auto"`` (``MCCL_WIRE_REDUCE``;
        for bf16 and fp16).
    """

    def __init__(self, *, wire_dtype: str | None = None, wire_dtype_min_bytes: int | str | None = None,
                 wire_reduce: str | None = None):
        if wire_reduce is not None and wire_reduce not in WIRE_REDUCES:
            raise ValueError(f"mccl.Options: wire_reduce {wire_reduce!r} is not one of {', '.join(WIRE_REDUCES)}")
        self.wire_reduce = wire_reduce
        if wire_dtype is not None and wire_dtype not in WIRE_DTYPES:
            raise ValueError(f"mccl.Options: wire_dtype {wire_dtype!r} is not one of {', '.join(WIRE_DTYPES)}")
        if wire_dtype_min_bytes is not None and (isinstance(wire_dtype_min_bytes, bool) or
                                                 not isinstance(wire_dtype_min_bytes, (int, str))):
            raise TypeError(f"mccl.Options: wire_dtype_min_bytes takes an int or text like '256K', "
                            f"not {type(wire_dtype_min_bytes).__name__}")
        self.wire_dtype = wire_dtype
        self.wire_dtype_min_bytes = wire_dtype_min_bytes

    def settings(self) -> dict[str, str]:
        """The settings by variable name, as the backend takes them."""
        out = {}
        if self.wire_dtype is not None:
            out["MCCL_WIRE_DTYPE"] = self.wire_dtype
        if self.wire_dtype_min_bytes is not None:
            out["MCCL_WIRE_DTYPE_MIN_BYTES"] = str(self.wire_dtype_min_bytes)
        if self.wire_reduce is not None:
            out["MCCL_WIRE_REDUCE"] = self.wire_reduce
        return out

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if v is not None)
        return f"mccl.Options({given})"
