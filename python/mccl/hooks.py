"""DDP communication hooks that use MCCL's 16-bit wire per model.

    pg = mccl.hooks.wire_group("bf16")          # same ranks, bf16 partial sums
    ddp.register_comm_hook(pg, mccl.hooks.wire_allreduce_hook)

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
    all-reduce; float32 buckets travel in the group's wire dtype, others as
    they are."""
    tensor = bucket.buffer()
    work = dist.all_reduce(tensor, op=dist.ReduceOp.AVG, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
