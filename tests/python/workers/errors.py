"""Bad input gets a clear error before any traffic (the group keeps
working); mismatched collectives and a silent peer give DistBackendError
naming both sides; later calls fail fast."""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from common import done, init

rank, world = init()
assert world >= 2


def expect(exc, needles, fn):
    try:
        fn()
    except exc as e:
        msg = str(e)
        for n in needles:
            assert n in msg, f"{n!r} not in: {msg}"
        return msg
    raise AssertionError(f"expected {exc.__name__} containing {needles}")


who = f"rank {rank}/{world}"
# Straight to the backend: torch.distributed would reject rank 7 itself first.
expect(ValueError, ["mccl broadcast", who, "root rank 7"],
       lambda: dist.distributed_c10d._get_default_group().broadcast(torch.zeros(3), 7))
expect(TypeError, ["mccl allreduce", who, "BXOR", "float32"],
       lambda: dist.all_reduce(torch.zeros(3), op=dist.ReduceOp.BXOR))
expect(TypeError, ["mccl allreduce", "PREMUL_SUM", "int64"],
       lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int64), op=dist._make_nccl_premul_sum(2.0)))
expect(ValueError, ["mccl allreduce", who, "PREMUL_SUM factor 1+2j is complex", "real factors only"],
       lambda: dist.all_reduce(torch.ones(3, dtype=torch.complex64),
                               op=dist._make_nccl_premul_sum(torch.tensor(1 + 2j))))
z = torch.tensor([1 + 1j, 2 - 3j], dtype=torch.complex64) * (rank + 1)
dist.all_reduce(z, op=dist._make_nccl_premul_sum(torch.tensor(2 + 0j)))  # a real value as a complex tensor
assert torch.equal(z, torch.tensor([1 + 1j, 2 - 3j], dtype=torch.complex64) * world * (world + 1)), z
expect(ValueError, ["split sizes sum to 3", "4 rows"],
       lambda: dist.all_to_all_single(torch.zeros(4), torch.zeros(4), [1] * world, [1, 2] + [0] * (world - 2)))
expect(ValueError, ["output list has", f"group has {world}"],
       lambda: dist.all_gather([torch.zeros(2)] * (world + 1), torch.zeros(2)))
expect(ValueError, ["expected world size", "x input's 3"],
       lambda: dist.all_gather_into_tensor(torch.zeros(3 * world + 1), torch.zeros(3)))
expect((ValueError, RuntimeError), ["mccl allreduce", "Sparse tensors are not supported"],
       lambda: dist.all_reduce(torch.zeros(3).to_sparse()))
expect(TypeError, ["dtype", "not supported"], lambda: dist.all_reduce(torch.zeros(3, dtype=torch.uint16)))
# gather / scatter lists, straight to the backend (on every rank, as root 0
# and as a non-root): the root's list has one tensor per rank, like the other
# side; non-roots pass none.
pg = dist.distributed_c10d._get_default_group()
if rank == 0:
    expect(ValueError, ["mccl gather", who, f"the root needs one output list of {world} tensors"],
           lambda: pg.gather([[torch.zeros(2)] * (world + 1)], [torch.zeros(2)], dist.GatherOptions()))
    expect(ValueError, ["mccl scatter", who, "an input tensor has 3 elements but the input has 2"],
           lambda: pg.scatter([torch.zeros(2)], [[torch.zeros(3)] * world], dist.ScatterOptions()))
else:
    expect(ValueError, ["mccl gather", who, "only the root (rank 0) takes output tensors"],
           lambda: pg.gather([[torch.zeros(2)] * world], [torch.zeros(2)], dist.GatherOptions()))
# Nothing above reached the wire: the group still works.
t = torch.tensor([1.0])
dist.all_reduce(t)
assert t.item() == world

# A group timeout is honoured: rank 0 waits in a collective rank 1 never joins.
slow = dist.new_group(list(range(world)), timeout=timedelta(seconds=2))
if rank == 0:
    start = time.monotonic()
    msg = expect(dist.DistBackendError, ["timed out", "allreduce"], lambda: dist.all_reduce(torch.zeros(2), group=slow))
    took = time.monotonic() - start
    assert 1.9 <= took < 6, took
else:
    time.sleep(4)

# Ranks that disagree on the element count: every rank fails, naming both
# sides, through the Work and through its Future.
n = 100 if rank != 1 else 99
work = dist.all_reduce(torch.ones(n), async_op=True)
fut = work.get_future()


def wait_both():
    try:
        work.wait()
    finally:
        dist.all_reduce(torch.ones(1))  # ranks that finished their part learn it here


msg = expect(dist.DistBackendError, ["disagree", "count="], wait_both)
assert "count=100" in msg and "count=99" in msg, msg
if not work.is_success():
    try:
        assert work.exception() is not None
    except TypeError:  # torch 2.5's binding returns a std::exception_ptr pybind11 cannot convert
        pass
    expect(dist.DistBackendError, ["disagree"], fut.wait)
start = time.monotonic()
expect(dist.DistBackendError, ["disagree"], lambda: dist.all_reduce(torch.ones(4)))
assert time.monotonic() - start < 1.0
done()
