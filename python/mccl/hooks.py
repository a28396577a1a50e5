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


class Int8State:
    """State of :func:`int8_allreduce_hook`: the group, the block size of the
    per-block scales, and each bucket's error-feedback residual (what the
    last quantization of that bucket left out, added back before the next)."""

    def __init__(self, process_group=None, block: int = 256):
        if block < 1:
            raise ValueError(f"Int8State: block must be at least 1, not {block}")
        self.process_group = process_group
        self.block = block
        self.residuals: dict[int, torch.Tensor] = {}


def _quantize(x: torch.Tensor, block: int):
    """int8 values and one float32 scale per `block` elements (x is padded to
    a multiple of block); dequantized = q * scale."""
    blocks = x.view(-1, block)
    scale = blocks.abs().amax(dim=1).clamp_min(1e-30) / 127.0
    q = torch.round(blocks / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.view(-1), scale


def int8_allreduce(x: torch.Tensor, group=None, block: int = 256) -> torch.Tensor:
    """The average over `group` of float32 `x`, with 1-byte values (plus one
    float32 scale per `block`) on the wire: each rank quantizes its values
    per block, an all-to-all gives each block's owner every rank's int8
    values and scales, the owner adds them dequantized in float32, averages,
    quantizes the result once, and an all-gather brings it to everyone (bit-
    identical everywhere). About a quarter of float32's bytes."""
    n = dist.get_world_size(group)
    flat = x.reshape(-1)
    per = -(-flat.numel() // (n * block)) * block  # elements per owner, whole blocks
    padded = torch.zeros(per * n, dtype=torch.float32, device=x.device)
    padded[:flat.numel()] = flat
    q, scale = _quantize(padded, block)
    qin, qout = q, torch.empty_like(q)
    sout = torch.empty_like(scale)
    dist.all_to_all_single(qout, qin, group=group)
    dist.all_to_all_single(sout, scale, group=group)
    mine = (qout.view(n, per // block, block).to(torch.float32) * sout.view(n, per // block, 1)).sum(0) / n
    rq, rs = _quantize(mine.reshape(-1), block)
    allq = torch.empty(per * n, dtype=torch.int8, device=x.device)
    alls = torch.empty(per * n // block, dtype=torch.float32, device=x.device)
    dist.all_gather_into_tensor(allq, rq, group=group)
    dist.all_gather_into_tensor(alls, rs, group=group)
    out = (allq.view(-1, block).to(torch.float32) * alls[:, None]).view(-1)[:flat.numel()]
    return out.view_as(x)


def int8_allreduce_hook(state: Int8State, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP hook: averages float32 buckets with 1-byte values on the wire
    (int8_allreduce) and error feedback: what quantizing a bucket lost is
    added to that bucket's gradients the next step, so over steps nothing is
    lost. Other dtypes are averaged as they are. Runs the collectives
    synchronously inside the hook (their results are needed to quantize)."""
    tensor = bucket.buffer()
    fut = torch.futures.Future()
    if tensor.dtype != torch.float32:
        dist.all_reduce(tensor, op=dist.ReduceOp.AVG, group=state.process_group)
        fut.set_result(tensor)
        return fut
    index = bucket.index()
    residual = state.residuals.get(index)
    if residual is not None and residual.shape == tensor.shape:
        tensor.add_(residual)
    # This rank's own quantization error, fed back next step.
    n = dist.get_world_size(state.process_group)
    per = -(-tensor.numel() // (n * state.block)) * state.block
    padded = torch.zeros(per * n, dtype=torch.float32, device=tensor.device)
    padded[:tensor.numel()] = tensor.reshape(-1)
    q, scale = _quantize(padded, state.block)
    sent = (q.view(-1, state.block).to(torch.float32) * scale[:, None]).view(-1)[:tensor.numel()]
    state.residuals[index] = (tensor.reshape(-1) - sent).view_as(tensor).clone()
    tensor.copy_(int8_allreduce(tensor, state.process_group, state.block))
    fut.set_result(tensor)
    return fut
