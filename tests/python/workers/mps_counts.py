"""The Metal port's work per op (fake port, private storage): one fence on
PyTorch's stream (shared by an op's pieces; one commit from torch 2.10, two
before), one command buffer on MCCL's queue for the copies in and one for
the copies back per piece, whatever the number of tensors; staging buffers
come from a pool, so repeated ops allocate none."""

import math
import os

import torch
import torch.distributed as dist

import mccl
from common import done, init

rank, world = init()
stats = mccl._C._mps_port_stats
assert stats() is not None, "run with MCCL_FAKE_DEVICE_FOR_TESTING=mps-private:<us>"
tri = world * (world + 1) // 2

# Warm up: the pool fills with the blocks these sizes need.
xs = [torch.full((n,), float(rank + 1)) for n in (7, 4099, 300_007)]
for _ in range(2):
    for x in xs:
        dist.all_reduce(x)
before = stats()
OPS = 12
for i in range(OPS):
    for x in xs:
        x.fill_(float(rank + 1 + i))
        dist.all_reduce(x)
        assert torch.all(x == float(tri + world * i)), (i, x[:3])
after = stats()
ops = OPS * len(xs)
spec = os.environ.get("MCCL_PIECE_BYTES", "4M")
piece = int(spec.rstrip("KM")) << {"K": 10, "M": 20}.get(spec[-1], 0)


def pieces(t):
    return math.ceil(t.nbytes / piece) if piece and t.nbytes >= 2 * piece else 1


grew = {k: after[k] - before[k] for k in after}
commits_per_fence = 1 if tuple(map(int, torch.__version__.split(".")[:2])) >= (2, 10) else 2
assert grew["buffer_allocations"] == 0, f"repeated ops allocated staging buffers: {grew}"
assert grew["fences"] == ops, f"one fence per op, its pieces included: {grew}"
assert grew["stream_commits"] == commits_per_fence * ops, grew
assert grew["queue_commits"] == 2 * OPS * sum(pieces(x) for x in xs), (
    f"one command buffer in and one back per piece: {grew}")

# A coalesced all-reduce of several tensors: still one command buffer each way.
ts = [torch.full((n,), float(rank)) for n in (1, 13, 1031, 65537)]
before = stats()
dist.all_reduce_coalesced(ts)
grew = {k: stats()[k] - before[k] for k in before}
assert grew["queue_commits"] == 2, f"coalesced copies batch into one command buffer each way: {grew}"
for t in ts:
    assert torch.all(t == float(world * (world - 1) // 2)), t[:3]
done()
