"""The profiler's span of an async op ends when the op completes, as
Gloo's does, not when its Work is destroyed.

Rank 1 joins each all-reduce 0.5 s late; rank 0 waits for the Work, keeps
it 1 s longer, then drops it. Rank 0's span must cover the wait only.
"""

import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from common import done, init

rank, world = init()
gloo = dist.new_group(list(range(world)), backend="gloo")
spans = {}
for name, group in (("mccl", None), ("gloo", gloo)):
    x = torch.full((13,), float(rank + 1))
    dist.all_reduce(x, group=group)  # connections up
    dist.barrier(group=gloo)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        if rank == 1:
            time.sleep(0.5)
        w = dist.all_reduce(x, async_op=True, group=group)
        w.wait()
        time.sleep(1.0)
        del w
    assert torch.equal(x, torch.full((13,), float(world * (world + 1) // 2) * world)), x
    ours = [e for e in prof.events() if e.name == f"{name}:all_reduce"]
    assert len(ours) == 1, [e.name for e in prof.events()]
    spans[name] = ours[0].time_range.elapsed_us() / 1e6
print(f"[rank {rank}] spans: {spans}", flush=True)
if rank == 0:
    assert 0.3 < spans["mccl"] < 1.2, spans  # 1.5 s: ended with the Work
    assert spans["gloo"] < 1.2, spans
done()
