"""A group's timeout changed after creation (ProcessGroup.set_timeout, which
sets it on the group's backends) holds for point-to-point ops as for
collectives: a receive whose sender never sends fails at the new 1.5 s,
naming it, instead of at the group's 60 s."""

import datetime
import time

import torch
import torch.distributed as dist

from common import done, init

rank, world = init(timeout=datetime.timedelta(seconds=60))
g = dist.new_group(list(range(world)))
g.set_timeout(datetime.timedelta(seconds=1.5))
if rank == 1:
    t = torch.zeros(3)
    start = time.monotonic()
    try:
        dist.recv(t, src=0, group=g)  # rank 0 never sends
        raise AssertionError("the receive did not fail")
    except RuntimeError as e:
        took = time.monotonic() - start
        assert 1.4 < took < 10, took
        assert "within its timeout of 1.5 s" in str(e), str(e)
dist.barrier()  # the default group keeps its own timeout and works
done()
