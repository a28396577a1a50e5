"""Lab tier: a host's cable is cut in the middle of a large all-reduce.

usage: cut_link.py STAMP_DIR

Every rank runs 16 MiB all-reduces (group timeout 3 s) and writes
STAMP_DIR/running.<rank> once traffic flows; the test then cuts one host's
link. No TCP reset ever arrives, so every rank, the cut one included, must
fail at the op timeout with DistBackendError naming the op, and must not
hang or hand back a corrupted result.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from common import init, log

stamp_dir = sys.argv[1]
TIMEOUT = 3.0
rank, world = init(timeout=timedelta(seconds=TIMEOUT))
x = torch.ones(4 << 20)
dist.all_reduce(x)
assert x[0].item() == world
open(os.path.join(stamp_dir, f"running.{rank}"), "w").close()
start = time.monotonic()
try:
    while time.monotonic() - start < 60:
        x.fill_(1.0)
        dist.all_reduce(x)
        assert torch.all(x == world), "an all-reduce that returned gave a wrong result"
    raise AssertionError("the link was not cut within 60 s")
except dist.DistBackendError as e:
    msg = str(e)
    log(f"failed as expected after {time.monotonic() - start:.1f} s: {msg}")
    assert "allreduce" in msg, msg
    assert "timed out" in msg or "aborted the group" in msg, msg
print("WORKER OK", flush=True)
os._exit(0)  # the group is poisoned and the peer unreachable: leave without a goodbye
