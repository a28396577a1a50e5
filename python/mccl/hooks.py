"""DDP communication hooks that use MCCL's compressed wires per model.

    pg = mccl.hooks.wire_group("bf16")          # same ranks, bf16 partial sums
    ddp.register_comm_hook(pg, mccl.hooks.wire_allreduce_hook)

    state = mccl.hooks.Int8State()              # int8 wire, error feedback
    ddp.register_comm_hook(state, mccl.hooks.int8_allreduce_hook)

Unlike PyTorch's ``bf16_compress_hook``, which all-reduces a bfloat16 copy of
the bucket (so every hop adds in bfloat16), the gradients stay float32: each
hop sends its partial sum in 16 bits and the receiver adds it in float32, so
the error grows by one rounding per hop; every rank ends bit-identical.
The hook's Future callback runs no kernel (safe on MPS).
"""

# No "from __future__ import annotations": DDP checks the hook's return
# annotation as an object (torch.futures.Future[torch.Tensor]).
from typing import Union

import torch
import torch.distributed as dist

from .options import Options


def wire_group(wire_dtype: str = "bf16", group=None, min_bytes: Union[int, str] = 0, reduce: str = "auto"):
    """A new mccl group of `group`'s ranks (default: the world) whose float32
    sums travel as `wire_dtype` (reduced by `reduce`: see mccl.Options).
    Every rank must call it (it is a new_group)."""
    ranks = None if group is None else dist.get_process_group_ranks(group)
    return dist.new_group(ranks=ranks, backend="mccl",
                          pg_options=Options(wire_dtype=wire_dtype, wire_dtype_min_bytes=min_bytes,
                                             wire_reduce=reduce))


def wire_allreduce_hook(process_group, bucket) -> torch.futures.Future[torch.Tensor]:
    """Averages the bucket over `process_group` (a wire_group) with one AVG
    all-reduce; float32 and float64 buckets travel in the group's wire dtype,
    others as they are."""
    tensor = bucket.buffer()
    work = dist.all_reduce(tensor, op=dist.ReduceOp.AVG, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


class Int8State:
    """State of :func:`int8_allreduce_hook`: a new mccl group of
    `process_group`'s ranks (default: the world) whose float32 all-reduces
    travel on the int8 wire (``MCCL_WIRE_DTYPE=int8``: one byte per value and
    a float32 scale per 256, by pairwise exchange: each rank's values are
    encoded once and summed in float32 by their block's owner), and each
    bucket's error-feedback residual: what the wire dropped of that bucket's
    gradients last step, added back before the next. Every rank must create
    it (it makes a group)."""

    def __init__(self, process_group=None):
        import os
        forced = [a for a in os.environ.get("MCCL_ALGO", "").split(",") if a.strip().startswith("allreduce=")]
        if forced:
            # A forced all-reduce algorithm turns the wire dtype off; the
            # residuals would then be sent twice (once in full, once fed back).
            raise ValueError(f"mccl.hooks.Int8State: MCCL_ALGO={os.environ['MCCL_ALGO']} forces the all_reduce "
                             "algorithm, which turns the int8 wire off; unset its allreduce= entry")
        self.parent = process_group  # other dtypes are averaged exactly here
        self.process_group = wire_group("int8", process_group, min_bytes=0)
        self.world_size = dist.get_world_size(self.process_group)
        # Keyed by the bucket's parameters: DDP rebuilds its buckets after
        # the first step, and a rebuilt bucket of the same index and size may
        # hold other parameters.
        self.residuals: dict[tuple, torch.Tensor] = {}


def int8_round_trip(x: torch.Tensor) -> torch.Tensor:
    """What the int8 wire delivers of float32 `x` as one rank's contribution
    to an all-reduce on an int8 group: x encoded (one scale per group of 256
    values, counted from its first element) and decoded. Bit-exact with the
    collective's own encoding."""
    from . import _C

    flat = x.detach().reshape(-1).contiguous()
    out = _C._int8_round_trip(flat.cpu())
    return out.to(x.device).view_as(x)


def int8_allreduce_hook(state: Int8State, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP hook: averages float32 buckets on the int8 wire with error
    feedback (about a quarter of float32's bytes): the bucket's residual from
    the last step is added, what this step's encoding drops is kept as the
    next residual, and one AVG all-reduce runs on the int8 group. Every rank
    ends bit-identical. Other dtypes are averaged exactly. The Future's
    callback runs no kernel (safe on MPS)."""
    tensor = bucket.buffer()
    group = state.parent
    if tensor.dtype == torch.float32 and state.world_size > 1:
        key = tuple(id(p) for p in bucket.parameters())
        residual = state.residuals.get(key)
        if residual is not None and residual.shape == tensor.shape:
            tensor.add_(residual)
        state.residuals[key] = tensor - int8_round_trip(tensor)
        group = state.process_group
    work = dist.all_reduce(tensor, op=dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
