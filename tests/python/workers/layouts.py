"""Every list and list-of-lists argument, laid out as torch documents it, with
sizes that differ per position (so a transposed reading cannot pass), distinct
data on every rank, each result checked exactly and against Gloo running the
same call. Then: a batch whose k-th tensor is bad is refused before any of
it is sent, and the group stays usable."""

import torch
import torch.distributed as dist

from common import done, init

rank, world = init()
gloo = dist.new_group(backend="gloo")
checks = 0


def data(src: int, pos: int, n: int, dtype=torch.int64) -> torch.Tensor:
    """What rank `src` holds at position `pos`: n exact integers unique to (src, pos)."""
    return (torch.arange(n, dtype=torch.int64) + 1000 * src + 100000 * pos).to(dtype)


def same(got, want, what):
    global checks
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.shape, want.shape)
    assert torch.equal(got, want), f"{what}: got {got.tolist()} want {want.tolist()}"
    checks += 1


def both(fn, what):
    """Runs fn(group) on mccl and on Gloo; the two results must be equal."""
    mine, theirs = fn(None), fn(gloo)
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        same(a, b, f"{what} [{i}] vs gloo")
    return mine


# all_gather_coalesced: output_tensor_lists[r][i] <- rank r's input i.
sizes = [2, 5, 3, 1][: max(2, world - 1)]


def ag_coalesced(group):
    ins = [data(rank, i, n) for i, n in enumerate(sizes)]
    outs = [[torch.full((n,), -1, dtype=torch.int64) for n in sizes] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins, group=group)
    return [t for lst in outs for t in lst]


flat = both(ag_coalesced, "all_gather_coalesced")
for r in range(world):
    for i, n in enumerate(sizes):
        same(flat[r * len(sizes) + i], data(r, i, n), f"all_gather_coalesced [{r}][{i}]")

# all_gather_coalesced with as many inputs as ranks (the case a transposed
# reading would accept) and different sizes per input.
sizes_w = [3 + 2 * i for i in range(world)]


def ag_square(group):
    ins = [data(rank, i, n) for i, n in enumerate(sizes_w)]
    outs = [[torch.zeros(n, dtype=torch.int64) for n in sizes_w] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins, group=group)
    return [t for lst in outs for t in lst]


flat = both(ag_square, "all_gather_coalesced (square)")
for r in range(world):
    for i, n in enumerate(sizes_w):
        same(flat[r * world + i], data(r, i, n), f"all_gather_coalesced square [{r}][{i}]")


# all_gather: tensor_list[r] <- rank r's tensor.
def ag(group):
    outs = [torch.zeros(7, dtype=torch.int32) for _ in range(world)]
    dist.all_gather(outs, data(rank, 0, 7, torch.int32), group=group)
    return outs


for r, t in enumerate(both(ag, "all_gather")):
    same(t, data(r, 0, 7, torch.int32), f"all_gather [{r}]")

# gather / scatter with every root: gather_list[r] <- rank r; rank r <- scatter_list[r].
for root in range(world):
    def gather(group):
        lst = [torch.zeros(5) for _ in range(world)] if rank == root else None
        dist.gather(data(rank, 1, 5, torch.float32), lst, dst=root, group=group)
        return lst or []

    for r, t in enumerate(both(gather, f"gather root={root}")):
        same(t, data(r, 1, 5, torch.float32), f"gather root={root} [{r}]")

    def scatter(group):
        out = torch.zeros(4, dtype=torch.float64)
        lst = [data(root, r, 4, torch.float64) for r in range(world)] if rank == root else None
        dist.scatter(out, lst, src=root, group=group)
        return [out]

    same(both(scatter, f"scatter root={root}")[0], data(root, rank, 4, torch.float64), f"scatter root={root}")


# reduce_scatter: rank r receives the sum over ranks of their input_list[r].
# (Gloo has no reduce_scatter of lists: checked against the exact sum.)
out = torch.zeros(6, dtype=torch.int64)
dist.reduce_scatter(out, [data(rank, r, 6) for r in range(world)])
same(out, sum(data(s, rank, 6) for s in range(world)), "reduce_scatter")


# all_to_all: input_tensor_list[j] goes to rank j, output_tensor_list[j]
# comes from rank j; the size depends on both ends.
def size(src, dst):
    return 1 + src + 3 * dst


def a2a(group):
    ins = [data(rank, j, size(rank, j)) for j in range(world)]
    outs = [torch.zeros(size(j, rank), dtype=torch.int64) for j in range(world)]
    dist.all_to_all(outs, ins, group=group)
    return outs


# (Gloo has no all_to_all of lists: checked against the exact data.)
for j, t in enumerate(a2a(None)):
    same(t, data(j, rank, size(j, rank)), f"all_to_all from rank {j}")

# all_to_all_single with uneven splits, rows of 2 elements.
ins_split = [size(rank, j) for j in range(world)]
outs_split = [size(j, rank) for j in range(world)]
src = torch.cat([data(rank, j, 2 * size(rank, j)).view(-1, 2) for j in range(world)])


def a2a_single(group):
    out = torch.zeros(sum(outs_split), 2, dtype=torch.int64)
    dist.all_to_all_single(out, src, outs_split, ins_split, group=group)
    return [out]


got = both(a2a_single, "all_to_all_single")[0]
same(got, torch.cat([data(j, rank, 2 * size(j, rank)).view(-1, 2) for j in range(world)]),
     "all_to_all_single")

# _coalescing_manager batches with a different size per position.
ns = [1, 7, 2, 13]
ins = [data(rank, i, n) for i, n in enumerate(ns)]
outs = [torch.zeros(n * world, dtype=torch.int64) for n in ns]
with dist._coalescing_manager(async_ops=True) as cm:
    for o, i in zip(outs, ins):
        dist.all_gather_into_tensor(o, i)
cm.wait()
for i, (n, o) in enumerate(zip(ns, outs)):
    same(o, torch.cat([data(r, i, n) for r in range(world)]), f"coalesced all_gather_into_tensor [{i}]")
fulls = [data(rank, i, n * world) for i, n in enumerate(ns)]
outs = [torch.zeros(n, dtype=torch.int64) for n in ns]
with dist._coalescing_manager(async_ops=True) as cm:
    for o, f in zip(outs, fulls):
        dist.reduce_scatter_tensor(o, f)
cm.wait()
for i, (n, o) in enumerate(zip(ns, outs)):
    want = sum(data(r, i, n * world) for r in range(world))[rank * n:(rank + 1) * n]
    same(o, want, f"coalesced reduce_scatter_tensor [{i}]")
ts = [data(rank, i, n) for i, n in enumerate(ns)]
with dist._coalescing_manager():
    for t in ts:
        dist.all_reduce(t)
for i, (n, t) in enumerate(zip(ns, ts)):
    same(t, sum(data(r, i, n) for r in range(world)), f"coalesced all_reduce [{i}]")

# batch_isend_irecv: to every other rank, a size that depends on both ends.
if world > 1:
    ops, recvd = [], {}
    for j in range(world):
        if j == rank:
            continue
        ops.append(dist.P2POp(dist.isend, data(rank, j, size(rank, j)), j))
        recvd[j] = torch.zeros(size(j, rank), dtype=torch.int64)
        ops.append(dist.P2POp(dist.irecv, recvd[j], j))
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    for j, t in recvd.items():
        same(t, data(j, rank, size(j, rank)), f"batch_isend_irecv from rank {j}")

# Object collectives: lists indexed by rank.
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "pad": "x" * rank})
assert objs == [{"rank": r, "pad": "x" * r} for r in range(world)], objs
got = [None]
dist.scatter_object_list(got, [("to", r) for r in range(world)] if rank == 0 else None, src=0)
assert got[0] == ("to", rank), got
checks += 2

# ---- a bad k-th tensor: refused before anything of the call is sent ------
SENTINEL = -7


def refused(call, what, words):
    global checks
    try:
        call()
    except (ValueError, TypeError) as e:
        msg = str(e)
        assert "mccl" in msg and f"rank {rank}/{world}" in msg, (what, msg)
        for w in words:
            assert w in msg, (what, w, msg)
        checks += 1
        return
    raise AssertionError(f"{what}: the bad call was accepted")


def untouched(ts, what):
    dist.barrier()
    probe = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(probe)  # everything queued before has run by now
    for t in ts:
        assert torch.all(t == SENTINEL), f"{what}: a tensor before the bad one was written: {t}"


# all_gather_coalesced: output_tensor_lists[1][2] has the wrong size.
ins = [data(rank, i, n) for i, n in enumerate([3, 4, 5])]
outs = [[torch.full((n,), SENTINEL, dtype=torch.int64) for n in [3, 4, 5]] for _ in range(world)]
outs[world - 1][2] = torch.full((6,), SENTINEL, dtype=torch.int64)
refused(lambda: dist.all_gather_coalesced(outs, ins), "all_gather_coalesced",
        [f"output_tensor_lists[{world - 1}][2]", "6 elements", "5"])
untouched([t for lst in outs for t in lst], "all_gather_coalesced")

# Coalesced all_gather_into_tensor: output 2 of 3 has the wrong size.
outs = [torch.full((n * world,), SENTINEL, dtype=torch.int64) for n in (2, 3)] + [
    torch.full((4 * world + 1,), SENTINEL, dtype=torch.int64)]
ins = [data(rank, i, n) for i, n in enumerate((2, 3, 4))]


def bad_batch():
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()


refused(bad_batch, "coalesced all_gather_into_tensor", ["outputs[2]", str(4 * world + 1)])
untouched(outs, "coalesced all_gather_into_tensor")

# Coalesced reduce_scatter_tensor: input 1 of 2 has the wrong dtype.
outs = [torch.full((3,), SENTINEL, dtype=torch.int64), torch.full((2,), SENTINEL, dtype=torch.int64)]
fulls = [data(rank, 0, 3 * world), data(rank, 1, 2 * world, torch.int32)]


def bad_rs():
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, f in zip(outs, fulls):
            dist.reduce_scatter_tensor(o, f)
    cm.wait()


refused(bad_rs, "coalesced reduce_scatter_tensor", ["inputs[1]", "int32", "int64"])
untouched(outs, "coalesced reduce_scatter_tensor")

# allreduce_coalesced (the backend call; torch's Python wrapper checks dtypes
# itself): the last tensor has another dtype.
ts = [torch.full((3,), SENTINEL, dtype=torch.int64), torch.full((2,), SENTINEL, dtype=torch.int64),
      torch.full((2,), SENTINEL, dtype=torch.int32)]
pg = dist.distributed_c10d._get_default_group()
refused(lambda: pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait(),
        "allreduce_coalesced", ["tensors[2]", "int32", "int64"])
untouched(ts[:2], "allreduce_coalesced")

# The group is still usable, with results checked.
t = data(rank, 9, 11)
dist.all_reduce(t)
same(t, sum(data(r, 9, 11) for r in range(world)), "all_reduce after refused calls")

print(f"checks passed: {checks}", flush=True)
done()
