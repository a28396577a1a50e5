"""FSDP2 (fully_shard on a CPU device mesh) over mccl matches a
single-process run; torch.distributed.checkpoint saves and loads its
sharded state."""

import copy
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch 2.5: FSDP2 was torch.distributed._composable.fsdp
    from torch.distributed._composable.fsdp import fully_shard

from common import done, init

rank, world = init()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(20, 48), torch.nn.ReLU(), torch.nn.Linear(48, 48),
                            torch.nn.ReLU(), torch.nn.Linear(48, 4))
x = torch.randn(world * 8, 20)
y = torch.randn(world * 8, 4)


def train(m, xs, ys, steps=5):
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(xs), ys).backward()
        opt.step()


ref = copy.deepcopy(model)
train(ref, x, y)
sharded = copy.deepcopy(model)
for layer in sharded:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(sharded, mesh=mesh)
shard = slice(rank * 8, (rank + 1) * 8)
train(sharded, x[shard], y[shard])
for (name, p), q in zip(sharded.named_parameters(), ref.parameters()):
    full = p.full_tensor()
    assert torch.allclose(full, q, atol=2e-5, rtol=1e-4), (name, (full - q).abs().max())

# Checkpoint round trip of the sharded model.
ckdir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
state = {"model": sharded.state_dict()}
dcp.save(state, checkpoint_id=ckdir)
fresh = copy.deepcopy(model)
for layer in fresh:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(fresh, mesh=mesh)
loaded = {"model": fresh.state_dict()}
dcp.load(loaded, checkpoint_id=ckdir)
fresh.load_state_dict(loaded["model"])
for p, q in zip(fresh.parameters(), sharded.parameters()):
    assert torch.equal(p.full_tensor(), q.full_tensor())
done()
