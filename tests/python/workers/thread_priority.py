"""MCCL_THREAD_PRIORITY (unset: latency, or as given) on every rank: an
all_reduce of distinct data is exact; every receive, send and engine thread
of MCCL runs with the 0.1 ms time slice (Linux 6.12+; under normal, as
created) and, under high, at nice -10
(where the kernel lets this process raise threads: CAP_SYS_NICE or
RLIMIT_NICE, judged here from /proc and getrlimit); the application's own
threads keep the process's values. Where something is refused, the threads
keep what could not be set and the rank's log carries the one warning
(checked by the test)."""

import os
import platform
import resource

import torch
import torch.distributed as dist

from common import done, init

SHORT_SLICE_NS = 100_000


def may_raise() -> bool:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:") and int(line.split()[1], 16) & (1 << 23):
                return True
    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return soft == resource.RLIM_INFINITY or 20 - soft <= -10


def has_slices() -> bool:
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 12)


def sched(tid) -> tuple[int, int]:
    """A thread's nice value and time slice (ns)."""
    with open(f"/proc/self/task/{tid}/sched") as f:
        slice_ns = next(int(line.split(":")[1]) for line in f if line.startswith("se.slice"))
    return os.getpriority(os.PRIO_PROCESS, int(tid)), slice_ns


def threads() -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            out.setdefault(name, []).append(sched(tid))
        except (OSError, ProcessLookupError, StopIteration):
            pass  # ended meanwhile
    return out


mode = os.environ.get("MCCL_THREAD_PRIORITY", "latency")
base = sched(os.getpid())
rank, world = init()
for n in (0, 1, 7, 1031):
    t = torch.arange(n, dtype=torch.float64) * (rank + 1) + rank
    dist.all_reduce(t)
    want = torch.arange(n, dtype=torch.float64) * (world * (world + 1) // 2) + world * (world - 1) // 2
    assert torch.equal(t, want), (n, t[:5], want[:5])
seen = threads()
nice = -10 if mode == "high" and may_raise() else base[0]
slice_ns = SHORT_SLICE_NS if mode != "normal" and has_slices() else base[1]
for name in ("mccl-recv", "mccl-send", "mccl-engine"):
    assert seen.get(name), f"rank {rank}: no {name} thread among {sorted(seen)}"
    assert all(v == (nice, slice_ns) for v in seen[name]), \
        f"rank {rank}: {name} at (nice, slice) {seen[name]}, want {(nice, slice_ns)}"
assert sched(os.getpid()) == base, "the calling thread was changed"
complete = mode == "normal" or ((mode != "high" or nice == -10) and slice_ns == SHORT_SLICE_NS)
print(f"PRIORITY complete={complete} recv={seen['mccl-recv']}", flush=True)
dist.barrier()
done()
