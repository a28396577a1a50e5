"""Where the then() callbacks of MPS ops run (fake Metal port,
MCCL_FAKE_DEVICE_FOR_TESTING=mps-*): never on an MCCL thread while the
thread that issued the op is running -- on that thread at its next MCCL
call or Work.wait(), on MCCL's callback thread once it is blocked (a
Future.wait() on a chained future; DDP's reducer), past the deadline only
when it does neither. PyTorch's MPS runtime is unsafe to use from two
threads at once, and callbacks run MPS kernels (DDP comm hooks)."""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import mccl
from common import done, init

rank, world = init()
assert mccl._C._fake_device_enabled(), "run with MCCL_FAKE_DEVICE_FOR_TESTING=mps-*"
MAIN = threading.get_native_id()
busy = False  # the main thread is computing (it would be using MPS)
records = []


def state_of(tid):
    with open(f"/proc/self/task/{tid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def record(fut):
    me = threading.get_native_id()
    # Running elsewhere than the issuing thread is allowed only while that
    # thread is blocked (or past the deadline, checked apart below).
    records.append((me == MAIN, mccl._C._on_callback_thread(), busy, state_of(MAIN) if me != MAIN else "-"))
    # The callback runs a "kernel" on the device, as a comm hook would.
    out = fut.value()[0]
    out.mul_(2)
    return out


def spin(seconds, until=None):
    global busy
    busy = True
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (until and until()):
        pass
    busy = False


def counts():
    return mccl._C._callback_counts()


def data(n, salt):
    return torch.arange(n, dtype=torch.float32) * (rank + 1) + salt


def want(n, salt):
    return sum(torch.arange(n, dtype=torch.float32) * (r + 1) + salt for r in range(world))


dist.barrier()
base = counts()

if sys.argv[1:] == ["deadline"]:
    # An issuer that neither calls MCCL nor blocks: past the deadline
    # (MCCL_CALLBACK_DEADLINE_MS, set by the test) the callback thread runs
    # the callback anyway, and says so once.
    assert os.environ["MCCL_CALLBACK_DEADLINE_MS"] == "200"
    w5 = dist.all_reduce(data(5, 5), async_op=True)
    c5 = w5.get_future().then(record)
    spin(10.0, until=lambda: bool(records))
    assert len(records) == 1 and records[0][:3] == (False, True, True), records
    assert torch.equal(c5.value(), 2 * want(5, 5))
    assert counts()["at_deadline"] == base["at_deadline"] + 1, counts()
    done()
    sys.exit(0)

# 1. The issuer computes for 0.5 s after the op: the op completes meanwhile,
#    its callback waits; Work.wait() runs it on the issuing thread.
x = data(1031, 1)
work = dist.all_reduce(x, async_op=True)
chained = work.get_future().then(record)
spin(0.5)
assert records == [], f"a callback ran while the issuing thread was computing: {records}"
assert counts()["pending"] >= 1 or not work.is_completed(), counts()
work.wait()
assert records == [(True, False, False, "-")], records
assert chained.done() and torch.equal(chained.value(), 2 * want(1031, 1))

# 2. The issuer's next MCCL call runs the callbacks of its earlier ops first.
records.clear()
y = data(13, 2)
w2 = dist.all_reduce(y, async_op=True)
c2 = w2.get_future().then(record)
spin(10.0, until=lambda: counts()["pending"] >= 1)
assert records == [], records
dist.all_reduce(data(7, 3))
assert records == [(True, False, False, "-")], records
assert torch.equal(c2.value(), 2 * want(13, 2))

# 3. The issuer blocks on a chained future (no MCCL call): the callback thread
#    runs the callback once it is parked; no hang.
records.clear()
z = data(97, 4)
w3 = dist.all_reduce(z, async_op=True)
t0 = time.monotonic()
c3 = w3.get_future().then(record)
c3.wait()
waited = time.monotonic() - t0
assert len(records) == 1 and records[0][:3] == (False, True, False) and records[0][3] in "SD", records
assert torch.equal(c3.value(), 2 * want(97, 4))
assert waited < 5, waited

# 3b. A callback that waits for its own op, or asks whether it is complete
#     (through MCCL, on whichever thread runs it): no deadlock.
w4 = dist.all_reduce(data(11, 6), async_op=True)
c4 = w4.get_future().then(lambda f: (w4.wait(), w4.is_completed(), f.value()[0] * 2)[2])
assert torch.equal(c4.wait(), 2 * want(11, 6))
w4b = dist.all_reduce(data(11, 7), async_op=True)
c4b = w4b.get_future().then(lambda f: (w4b.wait(), f.value()[0] * 2)[1])
w4b.wait()  # runs the callback here, which waits for its own op
assert torch.equal(c4b.value(), 2 * want(11, 7))

# 4. DDP with a comm hook whose callback runs a kernel (fp16 decompression):
#    no deadlock, the same parameters as with Gloo, nothing at the deadline.
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
ref.load_state_dict(net.state_dict())
gloo = dist.new_group(backend="gloo")
models = {"mccl": torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.001),
          "gloo": torch.nn.parallel.DistributedDataParallel(ref, process_group=gloo, bucket_cap_mb=0.001)}
for m in models.values():
    m.register_comm_hook(None, default_hooks.fp16_compress_hook)
opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, m in models.items()}
before = counts()
g = torch.Generator().manual_seed(100 + rank)
for step in range(3):
    inp = torch.randn(8, 16, generator=g)
    for k, m in models.items():
        opts[k].zero_grad()
        m(inp).square().mean().backward()
        opts[k].step()
for (name, a), b in zip(net.named_parameters(), ref.parameters()):
    assert torch.allclose(a, b, rtol=1e-3, atol=1e-5), (name, (a - b).abs().max())
after = counts()
assert after["at_deadline"] == before["at_deadline"], (before, after)
assert after["while_parked"] > before["while_parked"], (before, after)  # the reducer's final wait

end = counts()
assert end["pending"] == 0, end
print(f"rank {rank}: callback counts {dict((k, end[k] - base[k]) for k in end)}", flush=True)
assert mccl._C._fake_device_violations() == 0
assert mccl._C._fake_device_lifetime_violations() == 0
done()
