"""A process group whose rendezvous is an etcd cluster: argv[1] is an
etcd:// URL. Gloo, then MCCL, each all_reduces distinct per-rank data and
checks the exact sum. The gloo group's store is a temporary EtcdStore held by
c10d alone (PrefixStore(prefix, EtcdStore(...))), as a user would write it."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import mccl  # noqa: F401  registers "mccl"
from mccl.elastic.etcd import EtcdStore, connect_url, parse_url

url = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)

for backend in ("gloo", "mccl"):
    if backend == "gloo":
        endpoints, prefix = parse_url(url)
        store = dist.PrefixStore(f"pg-{backend}/", EtcdStore(endpoints, prefix, timeout=60))
    else:
        store = dist.PrefixStore(f"pg-{backend}/", connect_url(url, timeout=timedelta(seconds=60)))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    n = 1031
    x = torch.arange(n, dtype=torch.float64) * (rank + 1) + 1000 * rank
    dist.all_reduce(x)
    ref = sum(torch.arange(n, dtype=torch.float64) * (r + 1) + 1000 * r for r in range(world))
    assert torch.equal(x, ref), f"{backend}: rank {rank} got {x[:5]} expected {ref[:5]}"
    y = torch.full((7,), rank + 1, dtype=torch.int64)
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    assert torch.equal(y, torch.full((7,), world, dtype=torch.int64)), f"{backend}: MAX {y}"
    dist.destroy_process_group()
    print(f"{backend} ok", flush=True)

print("WORKER OK", flush=True)
