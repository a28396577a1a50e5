"""Soak: many mixed collectives of random sizes; no growth in file
descriptors, threads or resident memory.

usage: soak.py [OPS] [MAX_ELEMS] [SEED]

Every rank draws the same sequence of (op, size) from SEED; inputs differ
per rank and every result is checked exactly (small integers in float32).
Resources are sampled after a warm-up (a tenth of the ops) and at the end.
"""

import os
import random
import sys
import time
import warnings

import torch
import torch.distributed as dist

from common import done, init, log

OPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
MAX_ELEMS = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
SEED = int(sys.argv[3]) if len(sys.argv) > 3 else 1
RSS_SLACK_MB = 24  # allocator caches; a leak of one buffer per op is far larger

warnings.filterwarnings("ignore", category=FutureWarning)  # renamed APIs in newer torch
rank, world = init()
rng = random.Random(SEED)
KINDS = ["all_reduce", "all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
         "reduce", "barrier", "sendrecv", "async_batch"]


def resources():
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    return (len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")),
            rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20)


def base(n, salt):
    return (torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt) % 19


def step(i):
    kind = rng.choice(KINDS)
    n = rng.choice([0, 1, 2, 3, 17, 257, rng.randint(1, MAX_ELEMS)])
    root = rng.randrange(world)
    total = sum(((torch.arange(n, dtype=torch.int64) * 7 + r * 13 + i) % 19) for r in range(world)) \
        if kind in ("all_reduce", "reduce", "async_batch") else None
    if kind == "all_reduce":
        x = base(n, i).float()
        dist.all_reduce(x)
        assert torch.equal(x.long(), total), (i, kind, n)
    elif kind == "reduce":
        x = base(n, i).float()
        dist.reduce(x, dst=root)
        if rank == root:
            assert torch.equal(x.long(), total), (i, kind, n)
    elif kind == "broadcast":
        x = base(n, i).float() if rank == root else torch.full((n,), -1.0)
        dist.broadcast(x, src=root)
        want = (torch.arange(n) * 7 + root * 13 + i) % 19
        assert torch.equal(x.long(), want), (i, kind, n)
    elif kind == "all_gather":
        out = torch.empty(n * world)
        dist.all_gather_into_tensor(out, base(n, i).float())
        want = torch.cat([(torch.arange(n) * 7 + r * 13 + i) % 19 for r in range(world)])
        assert torch.equal(out.long(), want), (i, kind, n)
    elif kind == "reduce_scatter":
        x = torch.cat([base(n, i + r) for r in range(world)]).float()
        out = torch.empty(n)
        dist.reduce_scatter_tensor(out, x)
        want = sum((torch.arange(n) * 7 + r * 13 + i + rank) % 19 for r in range(world))
        assert torch.equal(out.long(), want), (i, kind, n)
    elif kind == "all_to_all":
        x = torch.cat([base(n, i + r) for r in range(world)]).float()
        out = torch.empty(n * world)
        dist.all_to_all_single(out, x)
        want = torch.cat([(torch.arange(n) * 7 + r * 13 + i + rank) % 19 for r in range(world)])
        assert torch.equal(out.long(), want), (i, kind, n)
    elif kind == "barrier":
        dist.barrier()
    elif kind == "sendrecv":
        right, left = (rank + 1) % world, (rank - 1) % world
        out = torch.empty(n)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, base(n, i).float(), right),
                                       dist.P2POp(dist.irecv, out, left)])
        for r in reqs:
            r.wait()
        want = (torch.arange(n) * 7 + left * 13 + i) % 19
        assert torch.equal(out.long(), want), (i, kind, n)
    else:  # several all-reduces in flight at once
        xs = [base(n, i).float() for _ in range(3)]
        works = [dist.all_reduce(x, async_op=True) for x in xs]
        for w, x in zip(works, xs):
            w.wait()
            assert torch.equal(x.long(), total), (i, kind, n)


start = time.monotonic()
warm = max(1, OPS // 10)
for i in range(warm):
    step(i)
before = resources()
for i in range(warm, OPS):
    step(i)
    if rank == 0 and (i + 1) % max(1, OPS // 10) == 0:
        log(f"soak: {i + 1}/{OPS} ops, {time.monotonic() - start:.0f} s")
dist.barrier()
after = resources()
took = time.monotonic() - start
print(f"SOAK ops={OPS} seconds={took:.1f} fds={before[0]}->{after[0]} threads={before[1]}->{after[1]} "
      f"rss_mb={before[2]:.1f}->{after[2]:.1f}", flush=True)
assert after[0] <= before[0], f"file descriptors grew: {before[0]} -> {after[0]}"
assert after[1] <= before[1], f"threads grew: {before[1]} -> {after[1]}"
assert after[2] - before[2] < RSS_SLACK_MB, f"resident memory grew {after[2] - before[2]:.1f} MiB"
done()
