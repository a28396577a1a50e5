"""init_process_group("mccl") with env://, tcp:// or file:// (argv[1])."""

import os
import sys

import torch
import torch.distributed as dist

import mccl  # noqa: F401

method = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if method == "env":
    dist.init_process_group("mccl")
elif method == "tcp":
    dist.init_process_group("mccl", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world)
elif method == "file":
    dist.init_process_group("mccl", init_method=f"file://{sys.argv[2]}", rank=rank, world_size=world)
else:
    raise SystemExit(f"unknown method {method}")
assert dist.get_backend() == "mccl", dist.get_backend()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2
dist.destroy_process_group()
print("WORKER OK", flush=True)
