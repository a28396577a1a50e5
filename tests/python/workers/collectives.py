"""Every collective x reduce op x dtype on this world size, against float64 /
exact-integer references and against Gloo (where Gloo supports the case),
with distinct data on every rank, counts 0, 1 and primes, non-contiguous
tensors and several roots."""

import zlib

import os

import torch
import torch.distributed as dist

from common import (ALL_DTYPES, COUNTS, FLOATS, OPS, PREMUL, assert_close, done, init,
                    reduce_op, reference, supported, value)

rank, world = init()
gloo = dist.new_group(backend="gloo")
checks = 0
gloo_checks = 0
OPS_ALL = list(OPS) + ["PREMUL_SUM"]


def gloo_ok(fn) -> bool:
    """Runs fn on the Gloo group; False if Gloo rejects the case up front
    (dtype or op it does not implement), so there is nothing to compare."""
    try:
        fn()
        return True
    except (RuntimeError, ValueError, TypeError):
        return False


def gloo_reduce_scatter_sums() -> bool:
    """Whether Gloo's reduce_scatter_tensor sums whatever the op: torch 2.5's
    takes every op and sums (later ones apply it, or reject it). Then only SUM
    has a Gloo reference. Same inputs on every rank, so every rank agrees."""
    probe = torch.zeros(1)
    op = "MAX" if world > 1 else "PREMUL_SUM"
    return gloo_ok(lambda: dist.reduce_scatter_tensor(probe, torch.ones(world), op=reduce_op(op), group=gloo)) \
        and probe.item() != (1.0 if op == "MAX" else PREMUL)


GLOO_RS_SUMS = gloo_reduce_scatter_sums()


def ok(got, want, op, what):
    global checks
    assert_close(got, want, op, what)
    checks += 1


# ---------------------------------------------------------------- allreduce
for dtype in ALL_DTYPES:
    for op in OPS_ALL:
        if not supported(dtype, op):
            continue
        for count in COUNTS:
            salt = zlib.crc32(f"{dtype}{op}{count}".encode()) % 1000
            t = value(dtype, op, rank, count, salt)
            dist.all_reduce(t, op=reduce_op(op))
            want = reference(dtype, op, world, count, salt)
            ok(t, want, op, f"all_reduce {dtype} {op} n={count}")
            g = value(dtype, op, rank, count, salt)
            if gloo_ok(lambda: dist.all_reduce(g, op=reduce_op(op), group=gloo)):
                ok(t, g, op, f"all_reduce {dtype} {op} n={count} vs gloo")
                gloo_checks += 1

# The support matrix holds both ways: unsupported pairs are refused up front.
for dtype in ALL_DTYPES:
    for op in OPS_ALL:
        if supported(dtype, op):
            continue
        try:
            dist.all_reduce(value(dtype, "SUM", rank, 3), op=reduce_op(op))
        except TypeError as e:
            assert op in str(e), e
            checks += 1
        else:
            raise AssertionError(f"all_reduce {dtype} {op} should be refused")

# Non-contiguous input (a transposed view) and a tensor that is a slice.
# MPS memory in Private storage cannot take strided results (the fake MPS
# device in private mode): a clear error instead.
PRIVATE_MPS = os.environ.get("MCCL_FAKE_DEVICE_FOR_TESTING", "").startswith("mps-private")
base = value(torch.float32, "SUM", rank, 6 * 7, 1).view(6, 7)
nc = base.t()
assert not nc.is_contiguous()
if PRIVATE_MPS:
    try:
        dist.all_reduce(nc)
        raise AssertionError("a strided Private MPS output was accepted")
    except ValueError as e:
        assert "Private storage" in str(e) and "allreduce" in str(e), e
    checks += 1
else:
    assert not nc.is_contiguous()
    dist.all_reduce(nc)
    ok(base, reference(torch.float32, "SUM", world, 42, 1).view(6, 7), "SUM", "all_reduce non-contiguous")
    big = value(torch.int64, "SUM", rank, 100, 2)
    sl = big[10:90:3]
    dist.all_reduce(sl)
    want = value(torch.int64, "SUM", rank, 100, 2)
    want[10:90:3] = reference(torch.int64, "SUM", world, 100, 2)[10:90:3]
    ok(big, want, "SUM", "all_reduce strided slice (rest untouched)")
    # Larger, with the layout differing between ranks (contiguous on even
    # ranks, a transposed view on odd ones): same collectives on every rank,
    # also when large all-reduces run in pieces (MCCL_PIECE_BYTES).
    vals = value(torch.float32, "SUM", rank, 40 * 30, 5).view(40, 30)
    mixed = vals.clone() if rank % 2 == 0 else vals.t().contiguous().t()
    assert mixed.is_contiguous() == (rank % 2 == 0)
    dist.all_reduce(mixed)
    ok(mixed.contiguous(), reference(torch.float32, "SUM", world, 40 * 30, 5).view(40, 30), "SUM",
       "all_reduce, contiguous on some ranks and strided on others")

# A strided input that is only read (all_gather): on a device its contiguous
# copy must outlive the queued device-to-host copy of it (the fake MPS port
# holds device memory as weakly as Metal does and counts a late copy).
src = value(torch.float32, "SUM", rank, 6 * 7, 6).view(6, 7).t()
assert not src.is_contiguous()
gathered = torch.empty(world * 42)
dist.all_gather_into_tensor(gathered, src)
want = torch.cat([value(torch.float32, "SUM", r, 6 * 7, 6).view(6, 7).t().reshape(-1) for r in range(world)])
assert torch.equal(gathered, want), (gathered[:6], want[:6])
checks += 1

# Complex: SUM on (re, im) pairs.
c = torch.complex(value(torch.float32, "SUM", rank, 17, 3), value(torch.float32, "SUM", rank, 17, 4))
dist.all_reduce(c)
ok(c, torch.complex(reference(torch.float32, "SUM", world, 17, 3), reference(torch.float32, "SUM", world, 17, 4)),
   "SUM", "all_reduce complex64")

# A large buffer through the ring.
lg = value(torch.float32, "SUM", rank, 3_000_017, 5)
dist.all_reduce(lg)
ok(lg, reference(torch.float32, "SUM", world, 3_000_017, 5), "SUM", "all_reduce 12 MB")

# all_reduce_coalesced: tensors of several sizes, one dtype.
ts = [value(torch.float64, "MAX", rank, n, 6 + n) for n in (0, 1, 31, 1031)]
dist.all_reduce_coalesced(ts, op=dist.ReduceOp.MAX)
for n, t in zip((0, 1, 31, 1031), ts):
    ok(t, reference(torch.float64, "MAX", world, n, 6 + n), "MAX", f"all_reduce_coalesced n={n}")

# --------------------------------------------------------------- broadcast
for dtype in ALL_DTYPES + [torch.complex128]:
    for root in sorted({0, world - 1, world // 2}):
        for count in COUNTS + [200_003]:
            salt = count + root
            src = (value(torch.float64, "SUM", root, count, salt).to(dtype) if dtype.is_complex
                   else value(dtype, "SUM", root, count, salt))
            t = src.clone() if rank == root else torch.zeros_like(src)
            dist.broadcast(t, src=root)
            ok(t, src, "SUM", f"broadcast {dtype} root={root} n={count}")
            g = src.clone() if rank == root else torch.zeros_like(src)
            if gloo_ok(lambda: dist.broadcast(g, src=root, group=gloo)):
                ok(t, g, "SUM", f"broadcast {dtype} vs gloo")
                gloo_checks += 1
# Broadcast into a non-contiguous tensor.
src = value(torch.int32, "SUM", 0, 35, 9).view(5, 7)
t = (src.clone() if rank == 0 else torch.zeros(7, 5, dtype=torch.int32)).t() if rank != 0 else src.clone()
if PRIVATE_MPS:  # rank 0's is contiguous; the others are refused before anything is sent
    t = src.clone() if rank == 0 else torch.zeros(5, 7, dtype=torch.int32)
dist.broadcast(t, src=0)
ok(t.contiguous(), src, "SUM", "broadcast non-contiguous")

# ------------------------------------------------------------------- reduce
for dtype in ALL_DTYPES:
    for op in OPS_ALL:
        if not supported(dtype, op):
            continue
        for root in sorted({0, world - 1}):
            for count in (0, 1, 13, 5003):
                salt = count * 3 + root
                t = value(dtype, op, rank, count, salt)
                orig = t.clone()
                dist.reduce(t, dst=root, op=reduce_op(op))
                g = value(dtype, op, rank, count, salt)
                if gloo_ok(lambda: dist.reduce(g, dst=root, op=reduce_op(op), group=gloo)):
                    if rank == root:
                        ok(t, g, op, f"reduce {dtype} {op} vs gloo")
                    gloo_checks += 1
                if rank == root:
                    ok(t, reference(dtype, op, world, count, salt), op, f"reduce {dtype} {op} root={root} n={count}")
                else:
                    ok(t, orig, "SUM", f"reduce leaves non-root input alone {dtype} {op}")

# ---------------------------------------------------------------- allgather
for dtype in ALL_DTYPES:
    for count in COUNTS + [100_003]:
        salt = count + 11
        mine = value(dtype, "SUM", rank, count, salt)
        outs = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(outs, mine)
        for r in range(world):
            ok(outs[r], value(dtype, "SUM", r, count, salt), "SUM", f"all_gather {dtype} n={count} block {r}")
        flat = torch.zeros(world * count, dtype=dtype)
        dist.all_gather_into_tensor(flat, mine)
        ok(flat, torch.cat([value(dtype, "SUM", r, count, salt) for r in range(world)]), "SUM",
           f"all_gather_into_tensor {dtype} n={count}")
        gouts = [torch.zeros_like(mine) for _ in range(world)]
        if gloo_ok(lambda: dist.all_gather(gouts, mine, group=gloo)):
            for r in range(world):
                ok(outs[r], gouts[r], "SUM", f"all_gather {dtype} vs gloo")
            gloo_checks += 1
# Outputs that are non-contiguous views.
store = torch.zeros(13, world, dtype=torch.float64)
outs = [store[:, r] for r in range(world)]
if PRIVATE_MPS:
    try:
        dist.all_gather(outs, value(torch.float64, "SUM", rank, 13, 4))
        raise AssertionError("strided Private MPS outputs were accepted")
    except ValueError as e:
        assert "Private storage" in str(e) and "allgather" in str(e), e
    store = torch.stack([value(torch.float64, "SUM", r, 13, 4) for r in range(world)], 1)
else:
    dist.all_gather(outs, value(torch.float64, "SUM", rank, 13, 4))
for r in range(world):
    ok(store[:, r].contiguous(), value(torch.float64, "SUM", r, 13, 4), "SUM", "all_gather into column views")

# ----------------------------------------------------------- reduce_scatter
for dtype in ALL_DTYPES:
    for op in OPS_ALL:
        if not supported(dtype, op):
            continue
        for count in (0, 1, 13, 3001):
            salt = count + 17
            full = value(dtype, op, rank, count * world, salt)
            out = torch.zeros(count, dtype=dtype)
            dist.reduce_scatter(out, list(full.chunk(world)) if count else [torch.zeros(0, dtype=dtype)] * world,
                                op=reduce_op(op))
            want = reference(dtype, op, world, count * world, salt)[rank * count:(rank + 1) * count]
            ok(out, want, op, f"reduce_scatter {dtype} {op} n={count}")
            g = torch.zeros(count, dtype=dtype)
            if count and (op == "SUM" or not GLOO_RS_SUMS) and gloo_ok(
                    lambda: dist.reduce_scatter_tensor(g, full, op=reduce_op(op), group=gloo)):
                ok(out, g, op, f"reduce_scatter {dtype} {op} n={count} vs gloo")
                gloo_checks += 1
            out2 = torch.zeros(count, dtype=dtype)
            dist.reduce_scatter_tensor(out2, full, op=reduce_op(op))
            ok(out2, want, op, f"reduce_scatter_tensor {dtype} {op} n={count}")

# In place: the output is this rank's block of the input (NCCL's in-place
# form); the ring uses its output as scratch before it has read that block.
for count in (1, 13, 50021):
    full = value(torch.float64, "SUM", rank, count * world, 71)
    want = reference(torch.float64, "SUM", world, count * world, 71)[rank * count:(rank + 1) * count]
    x = full.clone()
    blocks = list(x.chunk(world))
    dist.reduce_scatter(blocks[rank], blocks)
    ok(blocks[rank], want, "SUM", f"reduce_scatter in place n={count}")
    y = full.clone()
    dist.reduce_scatter_tensor(y.chunk(world)[rank], y)
    ok(y.chunk(world)[rank], want, "SUM", f"reduce_scatter_tensor in place n={count}")

# ---------------------------------------------------------- gather / scatter
for dtype in ALL_DTYPES:
    for root in range(world):
        for count in (0, 1, 4099) if dtype == torch.float32 else (0, 13):
            salt = count + root + 23
            mine = value(dtype, "SUM", rank, count, salt)
            gl = [torch.zeros_like(mine) for _ in range(world)] if rank == root else None
            dist.gather(mine, gl, dst=root)
            if rank == root:
                for r in range(world):
                    ok(gl[r], value(dtype, "SUM", r, count, salt), "SUM", f"gather {dtype} root={root}")
            sl = [value(dtype, "SUM", r, count, salt + 1) for r in range(world)] if rank == root else None
            out = torch.zeros(count, dtype=dtype)
            dist.scatter(out, sl, src=root)
            ok(out, value(dtype, "SUM", rank, count, salt + 1), "SUM", f"scatter {dtype} root={root}")

# ---------------------------------------------------------------- alltoall
for dtype in ALL_DTYPES:
    for rnd in range(3 if dtype == torch.float32 else 1):
        # Rank r sends (r + 2j + rnd) % 4 rows of 3 elements to rank j: uneven, some empty.
        rows = lambda s, d: (s + 2 * d + rnd) % 4
        in_splits = [rows(rank, j) for j in range(world)]
        out_splits = [rows(j, rank) for j in range(world)]
        tag = lambda s, d: (s * 10 + d) % 2 if dtype == torch.bool else s * 10 + d
        inp = torch.cat([torch.full((in_splits[j], 3), tag(rank, j), dtype=dtype) for j in range(world)])
        out = torch.zeros(sum(out_splits), 3, dtype=dtype)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        want = torch.cat([torch.full((out_splits[j], 3), tag(j, rank), dtype=dtype) for j in range(world)])
        ok(out, want, "SUM", f"all_to_all_single uneven {dtype}")
    # Rank 0 sends nothing at all (an empty input) but receives from the others.
    in_splits = [0] * world if rank == 0 else [j + 1 for j in range(world)]
    out_splits = [0 if j == 0 else rank + 1 for j in range(world)]
    inp = torch.cat([torch.full((in_splits[j], 3), tag(rank, j), dtype=dtype) for j in range(world)])
    out = torch.zeros(sum(out_splits), 3, dtype=dtype)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((out_splits[j], 3), tag(j, rank), dtype=dtype) for j in range(world)])
    ok(out, want, "SUM", f"all_to_all_single from an empty input {dtype}")
    # Equal splits, no sizes given.
    blocks = [value(dtype, "SUM", rank * world + j, 5, 61) for j in range(world)]
    out = torch.zeros(world * 5, dtype=dtype)
    dist.all_to_all_single(out, torch.cat(blocks))
    want = torch.cat([value(dtype, "SUM", j * world + rank, 5, 61) for j in range(world)])
    ok(out, want, "SUM", f"all_to_all_single equal {dtype}")
    t = torch.cat(blocks)  # in place: all_to_all_single(t, t)
    dist.all_to_all_single(t, t)
    ok(t, want, "SUM", f"all_to_all_single in place {dtype}")
    ins = [value(dtype, "SUM", rank * world + j, j + 1, 62) for j in range(world)]
    outs = [torch.zeros(rank + 1, dtype=dtype) for j in range(world)]
    dist.all_to_all(outs, ins)
    for j in range(world):
        ok(outs[j], value(dtype, "SUM", j * world + rank, rank + 1, 62), "SUM", f"all_to_all list {dtype}")

# ------------------------------------------------------------ coalesced ops
if world > 1:
    ins = [value(torch.float32, "SUM", rank, n, 31 + n) for n in (1, 7, 1031)]
    outs = [torch.zeros(n * world) for n in (1, 7, 1031)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for n, o in zip((1, 7, 1031), outs):
        ok(o, torch.cat([value(torch.float32, "SUM", r, n, 31 + n) for r in range(world)]), "SUM",
           f"coalesced all_gather_into_tensor n={n}")
    fulls = [value(torch.float64, "SUM", rank, n * world, 41 + n) for n in (1, 7, 1031)]
    outs = [torch.zeros(n, dtype=torch.float64) for n in (1, 7, 1031)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, f in zip(outs, fulls):
            dist.reduce_scatter_tensor(o, f)
    cm.wait()
    for n, o in zip((1, 7, 1031), outs):
        ok(o, reference(torch.float64, "SUM", world, n * world, 41 + n)[rank * n:(rank + 1) * n], "SUM",
           f"coalesced reduce_scatter_tensor n={n}")

# ------------------------------------------------------------------- p2p
if world > 1:
    right, left = (rank + 1) % world, (rank - 1) % world
    for count in COUNTS:
        for tag in (0, 5):
            x = value(torch.float32, "SUM", rank, count, tag)
            y = torch.zeros(count)
            reqs = [dist.isend(x, right, tag=tag), dist.irecv(y, left, tag=tag)]
            for q in reqs:
                q.wait()
            ok(y, value(torch.float32, "SUM", left, count, tag), "SUM", f"isend/irecv ring n={count} tag={tag}")
    # Any-source receive on rank 0.
    if rank == 0:
        got = set()
        for _ in range(world - 1):
            t = torch.zeros(2, dtype=torch.int64)
            src = dist.recv(t)
            assert t.tolist() == [src, src * 7], (src, t)
            got.add(src)
        assert got == set(range(1, world)), got
        checks += 1
    else:
        dist.send(torch.tensor([rank, rank * 7]), 0)

# ----------------------------------------------------------------- barrier
for _ in range(3):
    dist.barrier()

# Same-host reads: the test that asks for them checks that they were used.
if os.environ.get("EXPECT_LOCAL_READS") is not None and world > 1:
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    sent = backend.ref_frames_sent
    if os.environ["EXPECT_LOCAL_READS"] == "1":
        assert sent > 0, f"rank {rank}: no frame went by reference"
    else:
        assert sent == 0, f"rank {rank}: {sent} frames went by reference"

# Device copies never ran after their tensor was freed (fake MPS port).
import mccl  # noqa: E402

if mccl._C._fake_device_enabled():
    late = mccl._C._fake_device_lifetime_violations()
    assert late == 0, f"rank {rank}: {late} device copies ran after their tensor was freed"

# Sealed links: the test that asks for them checks every peer's frames were opened.
if os.environ.get("MCCL_WIRE_SECURITY", "off") != "off" and world > 1:
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    assert backend.sealed_frames_received > 100, backend.sealed_frames_received

dist.destroy_process_group(gloo)
assert gloo_checks > 100, gloo_checks  # Gloo really was compared with
print(f"rank {rank}: {checks} checks passed ({gloo_checks} against Gloo)", flush=True)
done()
