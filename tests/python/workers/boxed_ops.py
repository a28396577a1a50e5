"""MCCL's boxed c10d kernels (the ones it registers for MPS), exercised on
Linux: c10d's op schemas as released torch versions define them go into test
namespaces, the same boxed kernel is registered there for CPU, and every op
is called through the dispatcher with distinct data per rank.

- v25: the real schemas of torch 2.5.1, 2.6.0 and 2.7.0 (c10d_schemas.py,
  read from those wheels): ``bool asyncOp`` only on broadcast_, scatter_,
  _allgather_base_ and _reduce_scatter_base_, ``int timeout`` without a
  default, none at all on allgather_coalesced_
- v28: the real schemas of torch 2.8.0 through 2.13.0 (``bool
  async_op=True``, ``int timeout=-1`` on most ops)
- v27: synthetic, ``bool asyncOp`` (no default) on most ops: no release has
  it, but it proves the kernel reads arguments by name
- now: the installed torch's schemas as they are
"""

import re

import torch
import torch.distributed as dist

import mccl
from c10d_schemas import TORCH_25, TORCH_28
from common import done, init

OPS = [n for n in mccl._C._mps_kernels()] or sorted(
    n for n in dir(torch.ops.c10d) if n.endswith("_") or n in ("send", "barrier"))
WORK = "__torch__.torch.classes.c10d.Work"
REAL = {"v25": TORCH_25, "v28": TORCH_28}


def schema_of(version: str, name: str) -> str:
    if version in REAL:
        found = [s for s in REAL[version] if s.startswith(name + "(")]
        assert len(found) == 1, (version, name)
        return found[0]
    schema = str(getattr(torch.ops.c10d, name).default._schema).split("::", 1)[1]
    if version == "v27":
        schema = re.sub(r"\bbool async_?[oO]p(=True)?", "bool asyncOp", schema)
    return schema


def define(version: str) -> torch.library.Library:
    lib = torch.library.Library(f"mccl_{version}", "DEF")
    for name in OPS:
        lib.define(schema_of(version, name))
    return lib


rank, world = init()
pg = dist.group.WORLD.boxed()
SUM = mccl._C._script_reduce_op(int(dist.ReduceOp.SUM))
MAX = mccl._C._script_reduce_op(int(dist.ReduceOp.MAX))
tri = world * (world + 1) // 2
libs = []
for version in ("v25", "v28", "v27", "now"):
    libs.append(define(version))
    registered = mccl._C._register_boxed_kernels_for_testing(f"mccl_{version}", "CPU")
    assert sorted(registered) == sorted(OPS), (version, registered)
    # Registering again is a no-op (the ops have a CPU kernel now).
    assert mccl._C._register_boxed_kernels_for_testing(f"mccl_{version}", "CPU") == []
    ns = getattr(torch.ops, f"mccl_{version}")

    def call(name, *args, **kw):
        schema = getattr(ns, name).default._schema
        names = [a.name for a in schema.arguments]
        full = list(args)
        for a in schema.arguments[len(args):]:
            if a.name in kw:
                full.append(kw[a.name])
            elif a.name in ("async_op", "asyncOp"):
                full.append(True)
            elif a.name == "timeout":
                full.append(-1)
            else:
                raise AssertionError(f"{version} {name}: no value for {a.name} in {names}")
        out = getattr(ns, name)(*full)
        work = out[-1] if isinstance(out, tuple) else out
        work.wait()
        return out

    for n in (0, 1, 13):
        x = torch.arange(n, dtype=torch.float64) + rank + 1
        out = call("allreduce_", [x], pg, SUM, None)
        assert out[0][0] is x or torch.equal(out[0][0], x)
        want = torch.arange(n, dtype=torch.float64) * world + tri
        assert torch.equal(x, want), (version, n, x, want)

    m = torch.tensor([rank * 10, -rank], dtype=torch.int64)
    call("allreduce_", [m], pg, MAX, None)
    assert m.tolist() == [(world - 1) * 10, 0], m

    a, b = torch.full((3,), float(rank)), torch.full((2,), float(2 * rank))
    call("allreduce_coalesced_", [a, b], pg, SUM)
    assert torch.all(a == tri - world) and torch.all(b == 2 * (tri - world))

    x = torch.full((7,), float(rank + 5))
    call("broadcast_", [x], pg, root_rank=world - 1, root_tensor=0)
    assert torch.all(x == world + 4), x

    x = torch.full((5,), float(rank + 1))
    call("reduce_", [x], pg, SUM, root_rank=1, root_tensor=0)
    if rank == 1:
        assert torch.all(x == tri), x

    outs = [[torch.empty(4) for _ in range(world)]]
    call("allgather_", outs, [torch.full((4,), float(rank))], pg)
    assert all(torch.all(outs[0][r] == r) for r in range(world))

    flat = torch.empty(world * 3, dtype=torch.int32)
    call("_allgather_base_", flat, torch.full((3,), rank, dtype=torch.int32), pg)
    assert flat.tolist() == [r for r in range(world) for _ in range(3)], flat

    # torch's layout: output_lists[r][i] receives rank r's input i.
    lists = [[torch.empty(2), torch.empty(1)] for _ in range(world)]
    call("allgather_coalesced_", lists, [torch.full((2,), float(rank)), torch.full((1,), float(-rank))], pg)
    assert all(torch.all(lists[r][0] == r) and torch.all(lists[r][1] == -r) for r in range(world))

    o1, o2 = torch.empty(world * 2), torch.empty(world)
    call("allgather_into_tensor_coalesced_", [o1, o2], [torch.full((2,), float(rank)), torch.full((1,), float(rank + 1))], pg)
    assert o1.tolist() == [float(r) for r in range(world) for _ in range(2)] and o2.tolist() == [float(r + 1) for r in range(world)]

    rs = torch.empty(3)
    call("reduce_scatter_", [rs], [[torch.full((3,), float(rank + j)) for j in range(world)]], pg, SUM)
    assert torch.all(rs == sum(r + rank for r in range(world))), rs

    rs = torch.empty(2, dtype=torch.int64)
    inp = torch.arange(2 * world, dtype=torch.int64) * (rank + 1)
    call("_reduce_scatter_base_", rs, inp, pg, SUM)
    assert rs.tolist() == (torch.arange(2 * world).view(world, 2)[rank] * tri).tolist(), rs

    r1, r2 = torch.empty(1), torch.empty(2)
    call("reduce_scatter_tensor_coalesced_", [r1, r2], [torch.full((world,), float(rank)), torch.full((2 * world,), 1.0)], pg, SUM)
    assert r1.item() == tri - world and torch.all(r2 == world)

    gout = [[torch.empty(2) for _ in range(world)]] if rank == 0 else []
    call("gather_", gout, [torch.full((2,), float(rank * 3))], pg, root_rank=0)
    if rank == 0:
        assert all(torch.all(gout[0][r] == 3 * r) for r in range(world))

    sout = torch.empty(2)
    sin = [[torch.full((2,), float(r + 100)) for r in range(world)]] if rank == 0 else []
    call("scatter_", [sout], sin, pg, root_rank=0)
    assert torch.all(sout == rank + 100), sout

    aout = [torch.empty(1) for _ in range(world)]
    call("alltoall_", aout, [torch.full((1,), float(rank * 10 + j)) for j in range(world)], pg)
    assert [t.item() for t in aout] == [float(r * 10 + rank) for r in range(world)], aout

    base_out = torch.empty(world)
    call("alltoall_base_", base_out, torch.arange(world, dtype=torch.float32) + 10 * rank, pg, [], [])
    assert base_out.tolist() == [float(10 * r + rank) for r in range(world)], base_out

    call("barrier", torch.empty(1), pg, [])

    peer_to, peer_from = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(3)
    if rank % 2 == 0:
        call("send", [torch.full((3,), float(rank))], pg, dst=peer_to, tag=7)
        call("recv_", [got], pg, src=peer_from, tag=7)
    else:
        call("recv_", [got], pg, src=peer_from, tag=7)
        call("send", [torch.full((3,), float(rank))], pg, dst=peer_to, tag=7)
    assert torch.all(got == peer_from), got

    if rank == 0:
        anyb = torch.empty(1)
        for _ in range(world - 1):
            call("recv_any_source_", [anyb], pg, tag=3)
    else:
        call("send", [torch.full((1,), float(rank))], pg, dst=0, tag=3)
    print(f"{version}: {len(OPS)} ops through the boxed kernel", flush=True)

# A schema lacking an argument the kernel needs: a clear error, not a crash.
bad = torch.library.Library("mccl_bad", "DEF")
bad.define("allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, int op) -> __torch__.torch.classes.c10d.Work")
mccl._C._register_boxed_kernels_for_testing("mccl_bad", "CPU")
try:
    torch.ops.mccl_bad.allreduce_([torch.ones(1)], pg, 0)
    raise AssertionError("a schema without reduce_op was accepted")
except RuntimeError as e:
    assert "reduce_op" in str(e) and "mccl_bad::allreduce_" in str(e), e
done()
