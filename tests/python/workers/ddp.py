"""DDP over mccl matches a single-process run on the full batch, matches DDP
over Gloo, and works with a comm hook (which relies on Work futures)."""

import copy

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common import done, init

rank, world = init()
gloo = dist.new_group(backend="gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
x = torch.randn(world * 12, 16)
y = torch.randn(world * 12, 8)
steps = 6


def train(m, xs, ys):
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(xs), ys).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


full = train(copy.deepcopy(model), x, y)  # the single-process reference
shard = slice(rank * 12, (rank + 1) * 12)
# Small buckets so several allreduces overlap with backward.
mccl_ddp = DDP(copy.deepcopy(model), bucket_cap_mb=0.001)
got = train(mccl_ddp, x[shard], y[shard])
gloo_ddp = DDP(copy.deepcopy(model), process_group=gloo, bucket_cap_mb=0.001)
ref = train(gloo_ddp, x[shard], y[shard])
hooked = DDP(copy.deepcopy(model), bucket_cap_mb=0.001)
hooked.register_comm_hook(None, default_hooks.allreduce_hook)
hook = train(hooked, x[shard], y[shard])
for a, b, c, d in zip(got, full, ref, hook):
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), (a - b).abs().max()
    assert torch.allclose(a, c, atol=1e-6, rtol=1e-6), (a - c).abs().max()
    assert torch.allclose(a, d, atol=1e-6, rtol=1e-6), (a - d).abs().max()
# Every rank holds identical parameters.
for p in got:
    q = p.clone()
    dist.broadcast(q, src=0)
    assert torch.equal(p, q)
dist.destroy_process_group(gloo)
done()
