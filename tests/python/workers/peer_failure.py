"""A rank dies (SIGKILL) or goes silent (SIGSTOP) mid-job.

usage: peer_failure.py dead|silent VICTIM STAMPFILE

dead:   the victim kills itself with an all-reduce in flight. Every survivor
        (also ranks with no connection to the victim, when the ring is
        forced) fails within 2 s with DistBackendError naming itself, the
        victim's rank and address, the op and its sequence number; later
        calls fail at once with the same cause; destroy is prompt.
silent: rank 0 stops the victim. The survivors' next all-reduce fails at its
        timeout (per-op first, then the group's), not later; destroy is
        prompt; rank 0 then kills the victim.
"""

import os
import re
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from common import done, init, log

mode, victim, stamp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
GROUP_TIMEOUT = 4.0


def mccl_threads():
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().startswith("mccl-")
        except OSError:
            pass  # the thread ended while we looked
    return n


rank, world = init(timeout=timedelta(seconds=GROUP_TIMEOUT))
deadline = time.monotonic() + 2
while mccl_threads() < 3 and time.monotonic() < deadline:  # threads name themselves
    time.sleep(0.01)
assert mccl_threads() >= 3, "MCCL's threads are not named mccl-*"
pids = [None] * world
dist.all_gather_object(pids, os.getpid())
me = f"mccl rank {rank}/{world}"
x = torch.full((1 << 18,), float(rank))  # 1 MiB: the ring moves it in chunks
for _ in range(3):
    dist.all_reduce(x)


def expect_failure(fn, needles):
    try:
        fn()
    except dist.DistBackendError as e:
        msg = str(e)
        for n in needles:
            assert n in msg, f"{n!r} not in: {msg}"
        return msg
    raise AssertionError("expected DistBackendError")


def prompt_destroy():
    start = time.monotonic()
    dist.destroy_process_group()
    took = time.monotonic() - start
    assert took < 5.0, f"destroy_process_group took {took:.1f} s after the failure"
    assert mccl_threads() == 0, f"{mccl_threads()} MCCL threads outlived the group"
    print("WORKER OK", flush=True)


if mode == "dead":
    if rank == victim:
        dist.all_reduce(x, async_op=True)
        time.sleep(0.05)
        with open(stamp + ".tmp", "w") as f:
            f.write(repr(time.time()))
        os.rename(stamp + ".tmp", stamp)
        os.kill(os.getpid(), signal.SIGKILL)

    def loop():
        while True:
            dist.all_reduce(x)

    msg = expect_failure(loop, [me, f"rank {victim} (127.0.0.1:"])
    assert re.search(r"allreduce\(.*\) #\d+ failed", msg), msg
    failed_at = time.time()
    while not os.path.exists(stamp):
        time.sleep(0.01)
    with open(stamp) as f:
        died_at = float(f.read())
    took = failed_at - died_at
    log(f"failed {took * 1000:.0f} ms after rank {victim} died: {msg}")
    print(f"DETECT_MS {took * 1000:.1f}", flush=True)
    assert took < 2.0, f"detected the dead peer after {took:.2f} s: {msg}"
    # The group is poisoned: the next call fails at once, with the same cause.
    start = time.monotonic()
    again = expect_failure(lambda: dist.all_reduce(torch.ones(3)), [f"rank {victim} ("])
    assert time.monotonic() - start < 0.5, "a call on a poisoned group did not fail at once"
    log("later call:", again)
    prompt_destroy()

elif mode == "silent":
    dist.barrier()
    # A barrier's return on rank 0 does not mean the others have returned
    # (rank 0 may finish while the victim's last message to rank 1 is still
    # to be sent), so each rank says so in a file before rank 0 stops anyone.
    if rank != 0:
        open(f"{stamp}.{rank}", "w").close()
    if rank == victim:
        time.sleep(600)  # stopped here by rank 0, then killed
        sys.exit(3)
    if rank == 0:
        wait_until = time.monotonic() + 30
        while not all(os.path.exists(f"{stamp}.{r}") for r in range(1, world)):
            assert time.monotonic() < wait_until, "the other ranks never left the barrier"
            time.sleep(0.01)
        os.kill(pids[victim], signal.SIGSTOP)
    time.sleep(0.2)
    # Per-op timeout (shorter than the group's): fails at 1.5 s.
    opts = dist.AllreduceOptions()
    opts.timeout = timedelta(seconds=1.5)
    start = time.monotonic()
    pg = dist.distributed_c10d._get_default_group()
    msg = expect_failure(lambda: pg.allreduce([torch.ones(5)], opts).wait(), ["timed out", "allreduce"])
    took = time.monotonic() - start
    log(f"per-op timeout after {took:.2f} s: {msg}")
    print(f"SILENT_MS {took * 1000:.1f}", flush=True)
    assert 1.4 <= took < 2.3, f"a 1.5 s op timeout fired after {took:.2f} s"
    if rank == 0:
        os.kill(pids[victim], signal.SIGKILL)
    prompt_destroy()
else:
    raise SystemExit(f"unknown mode {mode}")
