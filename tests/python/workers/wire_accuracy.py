"""The one-process simulation of MCCL's 16-bit wire (mccl.bench.wire_accuracy,
whose figures at 24 and 200 ranks docs/benchmarks.md quotes) computes what
real all-reduces compute, bit for bit."""

import torch
import torch.distributed as dist

from common import done, init
import mccl
from mccl.bench.wire_accuracy import gradients, mccl_int8, mccl_ring, mccl_wire

rank, world = init()
for wire, reduce, simulate in (("bf16", "pairwise", mccl_wire), ("fp16", "pairwise", mccl_wire),
                               ("bf16", "ring", mccl_ring), ("fp16", "ring", mccl_ring)):
    g = dist.new_group(backend="mccl", pg_options=mccl.Options(wire_dtype=wire, wire_dtype_min_bytes=0,
                                                               wire_reduce=reduce))
    for count in (1, 13, 1031, 65537):
        for avg in (False, True):
            xs = gradients(world, count, seed=count)
            x = xs[rank].clone()
            dist.all_reduce(x, op=dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM, group=g)
            want = simulate(xs, wire, avg=avg)
            assert torch.equal(x.view(torch.int32), want.view(torch.int32)), (
                wire, reduce, count, avg, (x - want).abs().max().item())
    dist.destroy_process_group(g)
g = dist.new_group(backend="mccl", pg_options=mccl.Options(wire_dtype="int8", wire_dtype_min_bytes=0))
for count in (1, 13, 1031, 65537, 100003):
    for avg in (False, True):
        xs = gradients(world, count, seed=count)
        x = xs[rank].clone()
        dist.all_reduce(x, op=dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM, group=g)
        want = mccl_int8(xs, avg=avg)
        assert torch.equal(x.view(torch.int32), want.view(torch.int32)), (
            "int8", count, avg, (x - want).abs().max().item())
dist.destroy_process_group(g)
done()
