"""The profiler's span of an async op ends when the op completes, as
Gloo's does, not when its Work is destroyed.

Rank 1 joins each all-reduce 0.5 s late (counted from a barrier both ranks
pass inside the profile); rank 0 waits for the Work, keeps it 1 s longer,
then drops it. Rank 0's span must cover the wait only.
"""

import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from common import done, init

rank, world = init()
gloo = dist.new_group(list(range(world)), backend="gloo")
spans = {}
for name, group, other in (("mccl", None, gloo), ("gloo", gloo, None)):
    x = torch.full((13,), float(rank + 1))
    dist.all_reduce(x, group=group)  # connections up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        # Both ranks inside the profile before rank 1's delay starts (a
        # profiler's first start can take a few hundred ms); over the other
        # backend, so that its span is not one of those counted below.
        dist.barrier(group=other)
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
