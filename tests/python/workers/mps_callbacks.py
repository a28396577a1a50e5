"""Where the then() callbacks of MPS ops run (fake Metal port,
MCCL_FAKE_DEVICE_FOR_TESTING=mps-*): never on an MCCL thread while another
thread computes -- on the issuing thread at its next MCCL call or
Work.wait(), on a runner thread once every other thread is at rest (a
Future.wait() on a chained future; DDP's reducer), past the deadline only
when no thread ever rests. PyTorch's MPS runtime is unsafe to use from two
threads at once, and callbacks run MPS kernels (DDP comm hooks). Callbacks
that issue ops and wait for them (PowerSGD) do not hang."""

import os
import resource
import sys
import threading
import time

# Runner threads bring their own 8 MiB stack: run with a small default (as
# macOS gives secondary threads 512 KiB; glibc takes RLIMIT_STACK at start).
_KIB = int(os.environ.get("MCCL_TEST_STACK_KIB", "0"))
if _KIB and resource.getrlimit(resource.RLIMIT_STACK)[0] != _KIB * 1024:
    resource.setrlimit(resource.RLIMIT_STACK, (_KIB * 1024, resource.getrlimit(resource.RLIMIT_STACK)[1]))
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import mccl
from common import done, init

rank, world = init()
assert mccl._C._fake_device_enabled(), "run with MCCL_FAKE_DEVICE_FOR_TESTING=mps-*"
MAIN = threading.get_native_id()
if _KIB:
    # A thread started the default way gets the small stack here; MCCL's
    # runners must not (checked in record()).
    sizes = []
    t = threading.Thread(target=lambda: sizes.append(mccl._C._this_thread_stack_bytes()))
    t.start()
    t.join()
    assert 0 < sizes[0] <= 1 << 20, sizes
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
    if mccl._C._on_callback_thread():
        assert mccl._C._this_thread_stack_bytes() >= 8 << 20, mccl._C._this_thread_stack_bytes()

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
    # (MCCL_CALLBACK_DEADLINE_MS, set by the test) a runner thread runs
    # the callback anyway, and says so once.
    assert os.environ["MCCL_CALLBACK_DEADLINE_MS"] == "200"
    mccl._C._fake_mps_copy_back_delay(100_000)  # completes after then() (private storage)
    w5 = dist.all_reduce(data(5, 5), async_op=True)
    c5 = w5.get_future().then(record)
    mccl._C._fake_mps_copy_back_delay(-1)
    spin(10.0, until=c5.done)  # (the record comes first, then the Future completes)
    assert len(records) == 1 and records[0][:3] == (False, True, True), records
    assert torch.equal(c5.value(), 2 * want(5, 5))
    assert counts()["at_deadline"] == base["at_deadline"] + 1, counts()

    # Two ops past the deadline while the issuer still never rests: their
    # callbacks (each computing for 0.3 s) run one after the other, never
    # on two threads at once (in the order the ops completed).
    spans = []

    def slow(tag):
        def cb(fut):
            t0 = time.monotonic()
            out = fut.value()[0]
            out.mul_(2)
            while time.monotonic() < t0 + 0.3:
                pass
            spans.append((tag, t0, time.monotonic(), threading.get_native_id()))
            return out
        return cb

    mccl._C._fake_mps_copy_back_delay(100_000)
    w6 = dist.all_reduce(data(6, 6), async_op=True)
    c6 = w6.get_future().then(slow("first"))
    w7 = dist.all_reduce(data(7, 7), async_op=True)
    c7 = w7.get_future().then(slow("second"))
    mccl._C._fake_mps_copy_back_delay(-1)
    spin(10.0, until=lambda: c6.done() and c7.done())
    assert sorted(s[0] for s in spans) == ["first", "second"], spans
    assert spans[0][2] <= spans[1][1], f"two callbacks ran at once, on threads {spans[0][3]} and {spans[1][3]}: {spans}"
    assert torch.equal(c6.value(), 2 * want(6, 6)) and torch.equal(c7.value(), 2 * want(7, 7))
    assert counts()["at_deadline"] == base["at_deadline"] + 3, counts()
    done()
    sys.exit(0)

# 1. The issuer computes for 0.5 s after the op: the op completes meanwhile,
#    its callback waits; Work.wait() runs it on the issuing thread.
x = data(1031, 1)
work = dist.all_reduce(x, async_op=True)
chained = work.get_future().then(record)
spin(0.5)
# (Had the op completed before then(), the callback ran at once, here.)
assert all(r[0] for r in records), f"a callback ran while the issuing thread was computing: {records}"
work.wait()
assert records == [(True, False, False, "-")], records
assert chained.done() and torch.equal(chained.value(), 2 * want(1031, 1))

# 2. The issuer's next MCCL call runs the callbacks of its earlier ops first.
records.clear()
y = data(13, 2)
w2 = dist.all_reduce(y, async_op=True)
c2 = w2.get_future().then(record)
spin(10.0, until=lambda: records or counts()["pending"] >= 1)
assert all(r[0] for r in records), records
dist.all_reduce(data(7, 3))
assert records == [(True, False, False, "-")], records
assert torch.equal(c2.value(), 2 * want(13, 2))

# 3. The issuer blocks on a chained future (no MCCL call): a runner thread
#    runs the callback once it is parked; no hang.
records.clear()
z = data(97, 4)
mccl._C._fake_mps_copy_back_delay(300_000)  # the op completes after then() (else it runs here at once)
w3 = dist.all_reduce(z, async_op=True)
t0 = time.monotonic()
c3 = w3.get_future().then(record)
mccl._C._fake_mps_copy_back_delay(-1)
c3.wait()
waited = time.monotonic() - t0
# (In Shared storage the op may complete before then(): it then runs at
# once on this thread, which is as safe.)
assert len(records) == 1 and (records[0] == (True, False, False, "-") or
                              records[0][:3] == (False, True, False) and records[0][3] in "SD"), records
assert torch.equal(c3.value(), 2 * want(97, 4))
assert waited < 5, waited

# 3a. Another thread issues the op and then rests; this thread computes.
#     The issuer at rest is not enough: nothing runs until this thread rests
#     too (it waits on the chained future).
records.clear()
chained_x, started = [], threading.Event()


def issuer():
    mccl._C._fake_mps_copy_back_delay(300_000)  # completes after then()
    w = dist.all_reduce(data(29, 8), async_op=True)
    chained_x.append(w.get_future().then(record))
    mccl._C._fake_mps_copy_back_delay(-1)
    started.set()
    time.sleep(2.0)  # at rest, holding nothing


tx = threading.Thread(target=issuer)
tx.start()
started.wait()
spin(0.6)
# (With Shared storage the op may be done before then(): the callback then
# ran at once on the issuing thread, before this one computed.)
assert all(not r[2] for r in records), f"a callback ran while the main thread computed: {records}"
assert torch.equal(chained_x[0].wait(), 2 * want(29, 8))
# On a runner once this thread rests, or (Shared storage, op done before
# then()) at once on the issuing thread before this one computed.
assert len(records) == 1 and not records[0][2] and (not records[0][1] or records[0][3] in "SD"), records
tx.join()

# 3b. A callback that waits for its own op, or asks whether it is complete
#     (through MCCL, on whichever thread runs it): no deadlock.
w4 = dist.all_reduce(data(11, 6), async_op=True)
def own(f):
    w4.wait()
    assert w4.is_completed(), "is_completed() inside a callback of its own op"
    return f.value()[0] * 2


c4 = w4.get_future().then(own)
assert torch.equal(c4.wait(), 2 * want(11, 6))
w4b = dist.all_reduce(data(11, 7), async_op=True)
c4b = w4b.get_future().then(lambda f: (w4b.wait(), f.value()[0] * 2)[1])
w4b.wait()  # runs the callback here, which waits for its own op
assert torch.equal(c4b.value(), 2 * want(11, 7))

# 3c. Callbacks that issue ops and wait for them (as PowerSGD's do), run on
#     a runner: the inner ops' callbacks go to another runner. No hang.
def nested(f):
    inner = dist.all_reduce(data(17, 9), async_op=True)
    got = inner.get_future().then(lambda g: g.value()[0] + 1).wait()
    return f.value()[0][:17] * 2 + got


w6 = dist.all_reduce(data(31, 10), async_op=True)
c6 = w6.get_future().then(nested)
t0 = time.monotonic()
assert torch.equal(c6.wait(), 2 * want(31, 10)[:17] + want(17, 9) + 1)
assert time.monotonic() - t0 < 5

gloo = dist.new_group(backend="gloo")
g = torch.Generator().manual_seed(100 + rank)


def ddp_against_gloo(seed, steps, register, **ddp_kwargs):
    """The same small model trained with DDP over mccl (fake MPS) and over
    Gloo, each with the comm hook `register(model, process_group)` adds:
    the parameters must agree, and no callback may have waited for the
    deadline. Returns the callback counts before and after."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    ref.load_state_dict(net.state_dict())
    models = {"mccl": torch.nn.parallel.DistributedDataParallel(net, **ddp_kwargs),
              "gloo": torch.nn.parallel.DistributedDataParallel(ref, process_group=gloo, **ddp_kwargs)}
    register(models["mccl"], None)
    register(models["gloo"], gloo)
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, m in models.items()}
    before = counts()
    for step in range(steps):
        inp = torch.randn(8, 16, generator=g)
        for k, m in models.items():
            opts[k].zero_grad()
            m(inp).square().mean().backward()
            opts[k].step()
    for (name, a), b in zip(net.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-5), (name, (a - b).abs().max())
    after = counts()
    assert after["at_deadline"] == before["at_deadline"], (before, after)
    return before, after


# 4. DDP with a comm hook whose callback runs a kernel (fp16 decompression):
#    no deadlock, the same parameters as with Gloo, nothing at the deadline.
before, after = ddp_against_gloo(0, 3, lambda m, pg: m.register_comm_hook(pg, default_hooks.fp16_compress_hook),
                                 bucket_cap_mb=0.001)
assert after["while_quiet"] > before["while_quiet"], (before, after)  # the reducer's final wait

# 5. DDP with PowerSGD, whose callbacks issue all-reduces and wait for them
#    (one bucket: with more, ranks may issue them in different orders;
#    docs/mps.md).
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd


def power_sgd(m, pg):
    m.register_comm_hook(psgd.PowerSGDState(process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                            min_compression_rate=0.5, random_seed=7), psgd.powerSGD_hook)


ddp_against_gloo(1, 5, power_sgd)

end = counts()
assert end["pending"] == 0, end
print(f"rank {rank}: callback counts {dict((k, end[k] - base[k]) for k in end)}", flush=True)
assert mccl._C._fake_device_violations() == 0
assert mccl._C._fake_device_lifetime_violations() == 0
done()
