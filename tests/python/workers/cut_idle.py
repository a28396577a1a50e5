"""Lab tier: a host's cable is cut while every connection to it is idle.

usage: cut_idle.py STAMP_DIR

The group's op timeout is 120 s; MCCL_KEEPALIVE_S is 4. After one
all-reduce (connections up) every rank writes STAMP_DIR/ready.<rank>; the
test then cuts host 1's link. Ranks 0 and 2 are by then waiting in a
broadcast from rank 1, whose data will never come and which sends no reset.
Nothing of theirs is in flight, so only keepalive can tell them: each must
fail with DistBackendError naming rank 1 long before the op timeout. Rank 1
sleeps through the cut, and its broadcast afterwards must fail too (its
connections failed while it slept), not report a send that nobody got.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from common import init, log

stamp_dir = sys.argv[1]
rank, world = init(timeout=timedelta(seconds=120))
x = torch.full((1000,), float(rank + 1))
dist.all_reduce(x)
assert x[0].item() == world * (world + 1) / 2
open(os.path.join(stamp_dir, f"ready.{rank}"), "w").close()
start = time.monotonic()
t = torch.full((11,), float(rank))
try:
    if rank == 1:
        time.sleep(15)  # cut meanwhile
    dist.broadcast(t, src=1)
    raise AssertionError(f"the broadcast returned {t.tolist()} after {time.monotonic() - start:.1f} s")
except dist.DistBackendError as e:
    took = time.monotonic() - start
    msg = str(e)
    log(f"failed as expected after {took:.1f} s: {msg}")
    if rank != 1:
        assert "rank 1" in msg, msg
        assert took < 30, f"noticed only after {took:.1f} s (keepalive 4 s, op timeout 120 s): {msg}"
print("WORKER OK", flush=True)
os._exit(0)  # the group is failed and a peer unreachable: leave without a goodbye
