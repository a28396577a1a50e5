"""Subgroups, object collectives, p2p on a subset of ranks followed by a
collective, and many outstanding async ops with futures."""

import torch
import torch.distributed as dist

from common import done, init, log

rank, world = init()

# ---------------------------------------------------- async ops and futures
works, bufs = [], []
for k in range(100):
    t = torch.full((1 + 37 * k,), float(rank + k))
    bufs.append(t)
    works.append(dist.all_reduce(t, async_op=True))
for k in reversed(range(100)):
    works[k].wait()
for k, t in enumerate(bufs):
    want = sum(r + k for r in range(world))
    assert torch.all(t == want), (k, t[:3], want)

# Futures complete with the output tensors; then() chains run afterwards.
t = torch.ones(5) * rank
fut = dist.all_reduce(t, async_op=True).get_future()
chained = fut.then(lambda f: f.value()[0] * 2)
assert torch.all(chained.wait() == 2 * sum(range(world)))
assert fut.value()[0] is t or torch.equal(fut.value()[0], t)
w = dist.all_reduce(torch.ones(3), async_op=True)
w.wait()
assert w.is_completed() and w.is_success()

# ------------------------------------------------------------- subgroups
# Overlapping subgroups; every rank creates every group (as c10d requires).
evens = dist.new_group([r for r in range(world) if r % 2 == 0])
tail = dist.new_group(list(range(1, world))) if world > 1 else None
pair = dist.new_group([0, world - 1])
for _ in range(2):
    if rank % 2 == 0:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=evens)
        assert t.item() == sum(r for r in range(world) if r % 2 == 0), t
    if tail is not None and rank >= 1:
        t = torch.arange(4, dtype=torch.int64) * rank
        dist.all_reduce(t, group=tail, op=dist.ReduceOp.MAX)
        assert t.tolist() == [i * (world - 1) for i in range(4)], t
        src = dist.get_global_rank(tail, 0)
        b = torch.tensor([rank * 10])
        dist.broadcast(b, src=src, group=tail)
        assert b.item() == src * 10, b
    if rank in (0, world - 1):
        g = [torch.zeros(2) for _ in range(dist.get_world_size(pair))]
        dist.all_gather(g, torch.full((2,), float(rank)), group=pair)
        assert [x[0].item() for x in g] == sorted({0.0, float(world - 1)}) or world == 1, g

# new_subgroups splits the world into groups of 2 (world even) or 1.
size = 2 if world % 2 == 0 else 1
cur, subs = dist.new_subgroups(group_size=size)
t = torch.tensor([rank])
dist.all_reduce(t, group=cur)
base = rank - rank % size
assert t.item() == sum(range(base, base + size)), t

# ------------------------------------------------- p2p on a subset, then all
if world >= 2:
    for k in range(10):
        if rank == 0:
            dist.send(torch.tensor([k, 100 + k]), dst=1, tag=k)
        elif rank == 1:
            x = torch.zeros(2, dtype=torch.int64)
            dist.recv(x, src=0, tag=k)
            assert x.tolist() == [k, 100 + k], x
t = torch.tensor([1.0])
dist.all_reduce(t)
assert t.item() == world

# ---------------------------------------------------- object collectives
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "name": f"r{rank}", "data": list(range(rank))})
assert [o["rank"] for o in objs] == list(range(world)), objs
lst = [{"cfg": "x" * 1000, "n": 7}, [1, 2, 3]] if rank == 0 else [None, None]
dist.broadcast_object_list(lst, src=0)
assert lst[0]["n"] == 7 and lst[1] == [1, 2, 3], lst
out = [None] * world if rank == world - 1 else None
dist.gather_object((rank, "hello"), out, dst=world - 1)
if rank == world - 1:
    assert out == [(r, "hello") for r in range(world)], out
recv = [None]
dist.scatter_object_list(recv, [f"item{r}" for r in range(world)] if rank == 0 else None, src=0)
assert recv[0] == f"item{rank}", recv

for g in (evens, tail, pair, *subs):
    if g is not None:
        dist.destroy_process_group(g)
log("groups ok")
done()
