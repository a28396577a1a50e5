"""Strangers knock on every rank's data-plane port while the job runs.

A separate process (started by rank 0) opens connections to every rank's
listening address as fast as RATE allows: garbage bytes, connections closed
at once, half-open connections that never speak, and ones that echo MCCL's
own greeting with a bad proof. The job's all-reduces stay exact, every rank
logs and counts its rejections, and no file descriptor is left behind.
Prints the job's time for the same work without and with the flood.
"""

import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from common import assert_close, done, init, log, reference, value

RATE = float(sys.argv[1]) if len(sys.argv) > 1 else 400.0  # connections per second
ROUNDS = 60

FLOODER = r"""
import os, random, socket, sys, time
addrs = [a.rsplit(":", 1) for a in sys.argv[2:]]
rate = float(sys.argv[1])
held, n, t0 = [], 0, time.monotonic()
while True:
    host, port = addrs[n % len(addrs)]
    kind = n % 4
    try:
        s = socket.create_connection((host, int(port)), timeout=1)
        if kind == 0:
            s.sendall(os.urandom(64)); s.close()
        elif kind == 1:
            s.close()
        elif kind == 2:
            held.append(s)
            if len(held) > 40:
                held.pop(0).close()
        else:
            hello = s.recv(24)
            s.sendall(hello[:8] + os.urandom(72)); s.close()
    except OSError:
        pass
    n += 1
    sys.stdout.write(f"{n}\n"); sys.stdout.flush()
    delay = t0 + n / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
"""


def open_fds():
    return len(os.listdir("/proc/self/fd"))


rank, world = init()
backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
addrs = [None] * world
dist.all_gather_object(addrs, backend.address)


def phase(salt):
    start = time.monotonic()
    for i in range(ROUNDS):
        n = 4099 if i % 2 == 0 else 65537
        x = value(torch.float32, "SUM", rank, n, salt + i)
        dist.all_reduce(x)
        assert_close(x, reference(torch.float32, "SUM", world, n, salt + i), "SUM", f"round {i}")
    return time.monotonic() - start


phase(0)  # connections made, caches warm
fds_before = open_fds()
quiet = phase(1000)
flooder = None
if rank == 0:
    flooder = subprocess.Popen([sys.executable, "-c", FLOODER, str(RATE), *addrs],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
dist.barrier()
flooded = phase(2000)
dist.barrier()
attempts = 0
if rank == 0:
    flooder.kill()
    out, _ = flooder.communicate()
    attempts = int(out.split()[-1]) if out.split() else 0
quiet_after = phase(3000)

# Rejections are counted by the listener thread; the half-open ones when
# they close (the flooder's exit) or at the handshake timeout.
deadline = time.monotonic() + 15
while backend.rejected_connections == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
while open_fds() > fds_before and time.monotonic() < deadline:
    time.sleep(0.05)
rejected = backend.rejected_connections
assert rejected > 0, "no stranger was rejected: the flood did not reach this rank"
assert open_fds() <= fds_before, f"file descriptors grew from {fds_before} to {open_fds()}"
stats = [None] * world
dist.all_gather_object(stats, (quiet, flooded, quiet_after, rejected))
if rank == 0:
    log(f"flood: {attempts} stranger connections at {RATE:.0f}/s")
    for r, (q, f, a, rej) in enumerate(stats):
        log(f"rank {r}: {ROUNDS} all-reduces quiet {q * 1000:.0f} ms, flooded {f * 1000:.0f} ms, "
            f"after {a * 1000:.0f} ms; rejected {rej}")
    print(f"FLOOD attempts={attempts} quiet_ms={quiet * 1000:.0f} flooded_ms={flooded * 1000:.0f} "
          f"after_ms={quiet_after * 1000:.0f}", flush=True)
    assert attempts > 0
done()
