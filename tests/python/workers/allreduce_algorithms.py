"""Every all-reduce algorithm, forced with MCCL_ALGO on a group of its own,
through torch's public API: distinct data per rank, counts 0, 1 and primes,
against float64 / exact-integer references and against Gloo, and float32
sums whose value depends on the order of addition bit-identical on every
rank."""

import os
import zlib

import torch
import torch.distributed as dist

import mccl
from common import assert_close, done, init, reduce_op, reference, supported, value

ALGORITHMS = ["ring", "recursive_doubling", "direct", "bruck", "recursive_multiplying",
              "rabenseifner", "torus"]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8]
OPS = ["SUM", "AVG", "MAX", "PRODUCT", "PREMUL_SUM"]
COUNTS = [0, 1, 13, 1031, 4099]
MODEL = {"alpha_us": 30.0, "overhead_us": 10.0, "beta_ns_per_byte": 0.8, "gamma_ns_per_byte": 0.1}

rank, world = init()
gloo = dist.new_group(backend="gloo")
checks = 0


def order_sensitive(r: int, n: int) -> torch.Tensor:
    """Every third rank's values are 1e7 times larger: the float32 sum
    depends on the order in which the ranks' values are added."""
    i = torch.arange(n)
    scale = 1e7 if r % 3 == 0 else 1.0
    return (scale * ((r * 7 + i) % 11).to(torch.float32) / 3.0).to(torch.float32)


for algo in ALGORITHMS:
    os.environ["MCCL_ALGO"] = f"allreduce={algo}"
    # The settings a group reads at creation force this algorithm at every size.
    for size in (8, 1 << 30):
        assert mccl._C.chosen_algorithm("allreduce", size, world, MODEL).split(" ")[0] == algo, algo
    group = dist.new_group(backend="mccl")
    del os.environ["MCCL_ALGO"]
    compared = 0
    for dtype in DTYPES:
        for op in OPS:
            if not supported(dtype, op):
                continue
            for count in COUNTS:
                what = f"{algo}: all_reduce {dtype} {op} n={count} on {world} ranks"
                salt = zlib.crc32(f"{algo}{dtype}{op}{count}".encode()) % 1000
                t = value(dtype, op, rank, count, salt)
                dist.all_reduce(t, op=reduce_op(op), group=group)
                assert_close(t, reference(dtype, op, world, count, salt), op, what)
                g = value(dtype, op, rank, count, salt)
                try:
                    dist.all_reduce(g, op=reduce_op(op), group=gloo)
                except (RuntimeError, ValueError, TypeError):
                    pass  # Gloo does not implement the case: the reference stands
                else:
                    assert_close(t, g, op, what + " vs gloo")
                    compared += 1
                checks += 1
    assert compared > 0, f"{algo}: nothing compared with Gloo"
    mine = order_sensitive(rank, 4099)
    dist.all_reduce(mine, group=group)
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine, group=gloo)
    for r, theirs in enumerate(everyone):
        assert torch.equal(theirs, everyone[0]), f"{algo}: rank {r}'s float32 sum differs from rank 0's"
    dist.destroy_process_group(group)

if rank == 0:
    print(f"{checks} checks passed over {len(ALGORITHMS)} algorithms", flush=True)
done()
