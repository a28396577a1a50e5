"""The Metal port's work per op (fake port, private storage): one fence on
PyTorch's stream, one command buffer on MCCL's queue for the copies in and
one for the copies back, whatever the number of tensors; staging buffers
come from a pool, so repeated ops allocate none."""

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
grew = {k: after[k] - before[k] for k in after}
assert grew["buffer_allocations"] == 0, f"repeated ops allocated staging buffers: {grew}"
assert grew["fences"] == ops, f"one fence per op: {grew}"
assert grew["queue_commits"] == 2 * ops, f"one command buffer in and one back per op: {grew}"

# A coalesced all-reduce of several tensors: still one command buffer each way.
ts = [torch.full((n,), float(rank)) for n in (1, 13, 1031, 65537)]
before = stats()
dist.all_reduce_coalesced(ts)
grew = {k: stats()[k] - before[k] for k in before}
assert grew["queue_commits"] == 2, f"coalesced copies batch into one command buffer each way: {grew}"
for t in ts:
    assert torch.all(t == float(world * (world - 1) // 2)), t[:3]
done()
