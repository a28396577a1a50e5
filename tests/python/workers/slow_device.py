"""A slow device copy must not hold up the network (fake Metal port,
MCCL_FAKE_DEVICE_FOR_TESTING=mps-private:...): while an all_reduce's results
take seconds to reach the "device", a barrier on the same group (the same
connections, no device copies) completes, and the all_reduce's Future
callback runs on the issuing thread (in Work.wait), not on a network thread."""

import threading

import torch
import torch.distributed as dist

import mccl
from common import done, init

SLOW_US = 3_000_000  # each copy of results to the device takes 3 s

rank, world = init()
assert mccl._C._fake_device_enabled(), "run with MCCL_FAKE_DEVICE_FOR_TESTING=mps-private:<us>"
x = torch.arange(4099, dtype=torch.float32) * (rank + 1)
dist.barrier()
mccl._C._fake_mps_copy_back_delay(SLOW_US)
work = dist.all_reduce(x, async_op=True)
threads = []
MAIN = threading.get_native_id()


def record(fut):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
        threads.append((f.read().strip(), threading.get_native_id() == MAIN))
    return fut.value()


chained = work.get_future().then(record)
# The all_reduce's network part ends within milliseconds; its completion
# then waits 3 s for the copy back. The barrier's frames travel on the same
# connections: they must not wait behind that.
dist.barrier()
assert not work.is_completed(), (
    "the barrier waited for the all_reduce's slow device copy: completion blocked a network thread")
mccl._C._fake_mps_copy_back_delay(-1)
work.wait()
chained.wait()
tri = world * (world + 1) // 2
assert torch.equal(x, torch.arange(4099, dtype=torch.float32) * tri), x[:4]
assert len(threads) == 1 and threads[0][1], threads
assert mccl._C._fake_device_violations() == 0
assert mccl._C._fake_device_lifetime_violations() == 0
done()
