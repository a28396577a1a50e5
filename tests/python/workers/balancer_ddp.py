"""mccl.elastic.Balancer in a plain torch.distributed DDP loop (no Job):
rank r's emulated device has speed 2**r; every step splits 48 samples by
the ranks' measured speeds. The final parameters equal a one-process
float64 replay of the steps' global batches (the mean over each step's 48
samples), bit-identical on every rank, and the shares follow the speeds."""

import hashlib
import time

import torch
import torch.distributed as dist

from common import done, init
from mccl.elastic import Balancer

rank, world = init()
g = torch.Generator().manual_seed(7)
X = torch.randn(480, 6, generator=g, dtype=torch.float64)
Y = X @ torch.randn(6, 1, generator=g, dtype=torch.float64)


def net():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


TOTAL, STEPS, SAMPLE_S = 48, 10, 0.002
model = torch.nn.parallel.DistributedDataParallel(net())
opt = torch.optim.SGD(model.parameters(), lr=0.05)
bal = Balancer()
log = []
pos = 0
for step in range(STEPS):
    counts = bal.counts(TOTAL)
    lo = pos + sum(counts[:rank])
    mine = list(range(lo, lo + counts[rank]))
    with bal.step(model, counts):
        time.sleep(counts[rank] * SAMPLE_S / 2 ** rank)
        torch.nn.functional.mse_loss(model(X[mine]), Y[mine]).backward()
    bal.exchange()
    opt.step()
    opt.zero_grad()
    log.append(counts)
    pos += TOTAL

ref = net()
ropt = torch.optim.SGD(ref.parameters(), lr=0.05)
for step in range(STEPS):
    idx = list(range(step * TOTAL, (step + 1) * TOTAL))
    torch.nn.functional.mse_loss(ref(X[idx]), Y[idx]).backward()
    ropt.step()
    ropt.zero_grad()
for (k, a), b in zip(model.module.state_dict().items(), ref.state_dict().values()):
    assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (k, (a - b).abs().max())
digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in model.module.state_dict().values())).digest()
digests = [None] * world
dist.all_gather_object(digests, digest)
assert len(set(digests)) == 1, "ranks' parameters differ"
assert log[0] == [TOTAL // world + (r < TOTAL % world) for r in range(world)], log[0]
last = log[-1]
assert all(last[r] < last[r + 1] for r in range(world - 1)), log
print(f"SHARES-FINAL {last}", flush=True)
done()
