"""DDP over mccl matches a single-process run on the full batch, matches DDP
over Gloo, and works with comm hooks (which rely on Work futures): the
default all-reduce hook, and PowerSGD (one bucket), whose callbacks issue
all-reduces and wait for them (they must not run on MCCL's network threads). A then()
callback that waits for a collective of its own works too, and a waited-for
Work's Future is complete."""

import copy

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
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


def powersgd(pg):
    # One bucket: with several in flight, callbacks of one bucket and the
    # next bucket's all-reduce may be issued in different orders per rank
    # (docs/architecture.md, "Threads and the progress engine").
    m = DDP(copy.deepcopy(model), process_group=pg)
    m.register_comm_hook(psgd.PowerSGDState(process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                            min_compression_rate=0.5, random_seed=7), psgd.powerSGD_hook)
    return train(m, x[shard], y[shard])


for a, b in zip(powersgd(None), powersgd(gloo)):
    assert torch.allclose(a, b, atol=1e-6, rtol=1e-6), (a - b).abs().max()

# A callback that issues a collective and waits for it.
t = torch.full((3,), float(rank + 1))


def nested(f):
    u = f.value()[0] * 2
    dist.all_reduce(u, async_op=True).get_future().wait()
    return u


out = dist.all_reduce(t, async_op=True).get_future().then(nested).wait()
assert torch.equal(out, torch.full((3,), float(world * (world + 1) // 2 * 2 * world))), out
# Work.wait() returns with its Future complete.
for _ in range(20):
    w = dist.all_reduce(torch.ones(5), async_op=True)
    f = w.get_future()
    w.wait()
    assert f.done() and torch.equal(f.value()[0], torch.full((5,), float(world)))
# Every rank holds identical parameters.
for p in got:
    q = p.clone()
    dist.broadcast(q, src=0)
    assert torch.equal(p, q)
dist.destroy_process_group(gloo)
done()
