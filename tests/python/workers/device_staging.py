"""Device staging, on real devices (--device cuda) or on the fake device
(MCCL_FAKE_DEVICE_FOR_TESTING): async ops in flight with host ops between
them, results through Work.wait and through the Future (as DDP waits), a
DDP training step against a single-process reference, and no call from
MCCL's threads into the caller's stream.

usage: device_staging.py [cpu|cuda|mps]
"""

import sys
import warnings

import torch
import torch.distributed as dist

import mccl
from common import done, init

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
rank, world = init()
if device == "cuda":
    torch.cuda.set_device(rank % torch.cuda.device_count())
dev = (torch.device(device, torch.cuda.current_device()) if device == "cuda"
       else torch.device(device))
tri = world * (world + 1) // 2

# A bad peer is refused at the call, before any device copy, as for host
# tensors (device ops reach the core later, on the submit thread).
pg = dist.distributed_c10d._get_default_group()
for call, peer, words in ((pg.send, rank, "destination rank %d is this rank" % rank),
                          (pg.recv, world, "source rank %d is outside the group of %d" % (world, world))):
    try:
        call([torch.zeros(3, device=dev)], peer, 0)
        raise AssertionError(f"{call.__name__} to rank {peer} was accepted")
    except ValueError as e:
        assert words in str(e) and f"rank {rank}/{world}" in str(e), str(e)

# Many ops in flight; each input written just before its call (on the
# caller's stream), results checked after all waits.
works, bufs = [], []
for i in range(20):
    n = [1, 7, 1031, 65537, 300_007][i % 5]
    x = torch.empty(n, device=dev)
    x.fill_(float(rank + 1 + i))
    bufs.append((x, i))
    works.append(dist.all_reduce(x, async_op=True))
    if i % 4 == 0:  # a blocking host-side op in between keeps its order
        y = torch.full((3,), float(rank), device=dev)
        dist.broadcast(y, src=0)
        assert torch.all(y == 0)
for w in works:
    w.wait()
for x, i in bufs:
    want = tri + world * i
    assert torch.all(x == want), (i, x[:4], want)

# Through the Future, as DDP and comm hooks wait.
x = torch.arange(10, dtype=torch.float32, device=dev) * (rank + 1)
fut = dist.all_reduce(x, async_op=True).get_future()
out = fut.wait()[0]
assert torch.equal(out.cpu(), torch.arange(10, dtype=torch.float32) * tri)

# Outputs that are written (all_gather into tensor, reduce_scatter).
g = torch.empty(world * 5, device=dev)
dist.all_gather_into_tensor(g, torch.full((5,), float(rank), device=dev))
assert torch.equal(g.cpu(), torch.arange(world).repeat_interleave(5).float())
rs = torch.empty(4, device=dev)
dist.reduce_scatter_tensor(rs, torch.arange(4 * world, dtype=torch.float32, device=dev) + rank)
want = torch.arange(4 * world, dtype=torch.float32).view(world, 4)[rank] * world + sum(range(world))
assert torch.equal(rs.cpu(), want), (rs, want)

# DDP: two steps, compared with one process averaging the same batches.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(dev)
ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
for step in range(2):
    gen = torch.Generator().manual_seed(100 + step)
    batches = [torch.randn(8, 16, generator=gen) for _ in range(world)]
    opt.zero_grad()
    ddp(batches[rank].to(dev)).square().mean().backward()
    opt.step()
    ref_opt.zero_grad()
    sum(ref(b).square().mean() for b in batches).div(world).backward()
    ref_opt.step()
for p, q in zip(model.parameters(), ref.parameters()):
    assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), (p.flatten()[:3], q.flatten()[:3])

if mccl._C._fake_device_enabled():
    # Inputs written by a "kernel" still queued on the caller's stream when
    # the op is called, and outputs the stream still writes (an op that read
    # or wrote before the stream got there would see or lose them).
    for n in (1, 4099):
        x = torch.zeros(n)
        mccl._C._fake_device_kernel(x, float(rank + 1), 20_000)
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        assert torch.all(x == tri), (n, x[:4])
        out = torch.zeros(world * n)
        mccl._C._fake_device_kernel(out, -1.0, 20_000)  # the caller's earlier use of `out`
        dist.all_gather_into_tensor(out, torch.full((n,), float(rank)))
        assert torch.equal(out, torch.arange(world).repeat_interleave(n).float()), out[:4]
        # Coalesced: flattened (torch.cat) before staging; on the fake device
        # host ops are not stream-ordered, so no late kernel here.
        a, b = torch.zeros(3), torch.full((n,), float(rank))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_reduce_coalesced([a, b])
        assert torch.all(a == 0) and torch.all(b == tri - world), (a, b[:4])
    v = mccl._C._fake_device_violations()
    assert v == 0, f"{v} calls into the caller's stream came from MCCL threads"
print(f"device staging OK on {dev}", flush=True)
done()
