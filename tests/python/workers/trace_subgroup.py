"""Ranks 1..3 of four run all-reduces in a group of their own (group ranks
0..2, family ranks 1..3) with MCCL_TRACE_DIR set; each checks its sums
exactly (the test reads the traces)."""

import torch
import torch.distributed as dist

from common import init

rank, world = init()
sub = dist.new_group([1, 2, 3], backend="mccl")
if rank in (1, 2, 3):
    for i in range(60):
        t = torch.tensor([float(rank * 1000 + i), float(i)], dtype=torch.float64)
        dist.all_reduce(t, group=sub)
        assert t.tolist() == [float(6000 + 3 * i), float(3 * i)], (i, t)
dist.barrier()
dist.destroy_process_group()
print("WORKER OK", flush=True)
