"""Ranks 1..4 of five run all-reduces in a group of their own (group ranks
0..3, family ranks 1..4) with MCCL_TRACE_DIR set; each checks its sums
exactly (the test reads the traces)."""

import torch
import torch.distributed as dist

from common import init

rank, world = init()
sub = dist.new_group([1, 2, 3, 4], backend="mccl")
if rank in (1, 2, 3, 4):
    for i in range(60):
        t = torch.tensor([float(rank * 1000 + i), float(i)], dtype=torch.float64)
        dist.all_reduce(t, group=sub)
        assert t.tolist() == [float(10000 + 4 * i), float(4 * i)], (i, t)
dist.barrier()
dist.destroy_process_group()
print("WORKER OK", flush=True)
