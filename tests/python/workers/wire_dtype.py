"""MCCL_WIRE_DTYPE through torch.distributed: float32 all_reduce with bf16 or
fp16 partial sums on the wire gives bit-identical results on every rank,
within one rounding per hop of a float64 reference, and DDP replicas stay
bit-identical over training steps."""

import os

import torch
import torch.distributed as dist
from torch import nn

from common import done, init

rank, world = init()
wire = os.environ["MCCL_WIRE_DTYPE"]
u = 2.0 ** -8 if wire == "bf16" else 2.0 ** -11


def data(r, n):
    g = torch.Generator().manual_seed(1000 + r)
    return torch.randn(n, generator=g) * (r + 1)


for n in (1, 13, 1031, 65537, 1 << 20):
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        x = data(rank, n)
        dist.all_reduce(x, op=op)
        stack = torch.stack([data(r, n).double() for r in range(world)])
        want = stack.sum(0) if op == dist.ReduceOp.SUM else stack.mean(0)
        scale = stack.abs().sum(0) / (world if op == dist.ReduceOp.AVG else 1)
        err = (x.double() - want).abs()
        assert bool((err <= (world + 1) * u * scale + 1e-30).all()), (n, op, float((err / scale).max()))
        if n == 1 << 20:  # and the 16-bit wire was used: float32 partial sums err ~2^-24
            assert float((err / scale).max()) > u / 8, f"no 16-bit rounding seen ({wire})"
        # Bit-identical everywhere: every rank's result, gathered exactly.
        mine = x.view(torch.int32)
        everyone = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine)
        assert all(torch.equal(e, everyone[0]) for e in everyone), f"ranks differ at n={n}"

# DDP: gradients averaged with a 16-bit wire; replicas never drift apart.
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
for step in range(5):
    opt.zero_grad()
    nn.functional.mse_loss(model(torch.randn(16, 64, generator=g)), torch.randn(16, 8, generator=g)).backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).view(torch.int32)
everyone = [torch.empty_like(flat) for _ in range(world)]
dist.all_gather(everyone, flat)
assert all(torch.equal(e, everyone[0]) for e in everyone), "DDP replicas drifted apart"

# FSDP2: gradients reduce-scattered with the 16-bit wire while FSDP's reduce
# dtype stays float32; the result stays within the wire's rounding of a
# float64 one-process run of the same steps.
try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch 2.5
    from torch.distributed._composable.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh


def make():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 8))


def batch(step, r):
    gen = torch.Generator().manual_seed(100 * step + r)
    return torch.randn(16, 64, generator=gen), torch.randn(16, 8, generator=gen)


ref = make().double()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
for step in range(3):
    ref_opt.zero_grad()
    (sum(nn.functional.mse_loss(ref(x.double()), y.double()) for x, y in (batch(step, r) for r in range(world)))
     / world).backward()
    ref_opt.step()
mesh = init_device_mesh("cpu", (world,))
sharded = make()
for layer in (sharded[0], sharded[2]):
    fully_shard(layer, mesh=mesh)
fully_shard(sharded, mesh=mesh)
opt = torch.optim.SGD(sharded.parameters(), lr=0.05)
for step in range(3):
    opt.zero_grad()
    x, y = batch(step, rank)
    nn.functional.mse_loss(sharded(x), y).backward()
    opt.step()
worst = max((p.full_tensor().double() - q.detach()).abs().max().item()
            for p, q in zip(sharded.parameters(), ref.parameters()))
print(f"FSDP2 with a {wire} wire: {worst:.2e} from the float64 reference", flush=True)
assert 1e-7 < worst < 1e-3, f"FSDP2 with a {wire} wire is {worst:.2e} from the float64 reference"
done()
