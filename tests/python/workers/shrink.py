"""torch.distributed.shrink_group over mccl, the way torch documents it.

5 ranks. Round 1 (SHRINK_DEFAULT): rank 2 leaves; the other four shrink the
default group and keep computing on the new ranks. Round 2 (SHRINK_ABORT):
the process that was rank 4 dies while every rank waits in an all_reduce;
the survivors see the failure, shrink with SHRINK_ABORT, and the next
collectives are exact. Then: abort() of one group leaves another usable.
Every result is checked against exact integers computed from the original
ranks (distinct per rank)."""

import os
import time

import torch
import torch.distributed as dist

from common import done, init, log

rank, world = init()
orig = rank  # the rank this process had in the first group
assert world == 5, world


def data(who: int, n: int, salt: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int64) * 7 + 1000 * who + salt


def check_sum(members: list[int], n: int, salt: int, what: str):
    t = data(orig, n, salt)
    dist.all_reduce(t)
    want = sum(data(m, n, salt) for m in members)
    assert torch.equal(t, want), f"{what}: {t[:4].tolist()} want {want[:4].tolist()}"


everyone = [0, 1, 2, 3, 4]
check_sum(everyone, 1031, 1, "before")

# ---- round 1: rank 2 leaves; SHRINK_DEFAULT --------------------------------
if orig == 2:
    dist.barrier()  # every rank is past its last op on the old group
    dist.destroy_process_group()
    print("left the group", flush=True)
    print("WORKER OK", flush=True)
    raise SystemExit(0)
dist.barrier()
t0 = time.monotonic()

def backend():
    return dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))


addr_before = backend().address
group = dist.shrink_group([2])
shrink_s = time.monotonic() - t0
survivors = [0, 1, 3, 4]
assert dist.get_world_size() == 4, dist.get_world_size()
assert dist.get_rank() == survivors.index(orig), (dist.get_rank(), orig)
assert group == dist.distributed_c10d._get_default_group()
# The same listener and port: no new rendezvous.
assert backend().address == addr_before, (backend().address, addr_before)
for salt, n in ((2, 1), (3, 13), (4, 100003)):
    check_sum(survivors, n, salt, f"after SHRINK_DEFAULT n={n}")
# Point-to-point by new rank.
r, m = dist.get_rank(), dist.get_world_size()
out, got = data(orig, 5, 9), torch.zeros(5, dtype=torch.int64)
reqs = [dist.isend(out, (r + 1) % m), dist.irecv(got, (r - 1) % m)]
for q in reqs:
    q.wait()
assert torch.equal(got, data(survivors[(r - 1) % m], 5, 9)), got
log(f"SHRINK_DEFAULT took {shrink_s * 1000:.1f} ms")
# DDP on the shrunk group (torch registers a shrunk group's backend as Gloo;
# mccl re-registers it as the plugin it is, or DDP's logger crashes).
torch.manual_seed(0)
ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3).double())
x = torch.arange(8, dtype=torch.float64).view(2, 4) * (orig + 1)
ddp(x).sum().backward()
g = torch.zeros(3, 4, dtype=torch.float64)
for s in survivors:
    g += torch.ones(3, 1, dtype=torch.float64) * (torch.arange(8, dtype=torch.float64).view(2, 4) * (s + 1)).sum(0)
assert torch.allclose(ddp.module.weight.grad, g / len(survivors)), ddp.module.weight.grad
del ddp

# ---- round 2: the process that was rank 4 dies mid-collective; SHRINK_ABORT
if orig == 4:
    time.sleep(0.2)  # the others are waiting in the all_reduce by now
    os._exit(17)
t = data(orig, 1000, 5)
t0 = time.monotonic()
try:
    dist.all_reduce(t)
    raise AssertionError("the all_reduce with a dead rank completed")
except dist.DistBackendError as e:
    detect_s = time.monotonic() - t0
    assert "rank" in str(e), e
dead = survivors.index(4)
t1 = time.monotonic()
dist.shrink_group([dead], shrink_flags=dist.distributed_c10d.SHRINK_ABORT)
abort_s = time.monotonic() - t1
survivors = [0, 1, 3]
assert dist.get_world_size() == 3 and dist.get_rank() == survivors.index(orig)
check_sum(survivors, 4099, 6, "after SHRINK_ABORT")
log(f"failure seen after {detect_s * 1000:.0f} ms (0.2 s of it waiting for the death); "
    f"SHRINK_ABORT took {abort_s * 1000:.1f} ms")

# ---- abort() of one group leaves the others usable --------------------------
side = dist.new_group(backend="mccl")
other = dist.new_group(backend="mccl")
check_sum(survivors, 7, 7, "before abort")
side._get_backend(torch.device("cpu")).abort()
t = data(orig, 11, 8)
dist.all_reduce(t, group=other)
assert torch.equal(t, sum(data(s, 11, 8) for s in survivors)), t
check_sum(survivors, 3, 9, "default group after another group's abort")
try:
    dist.all_reduce(torch.zeros(1), group=side)
    raise AssertionError("the aborted group took an op")
except (dist.DistBackendError, RuntimeError) as e:
    assert "abort" in str(e), e

print("checks passed", flush=True)
done()
