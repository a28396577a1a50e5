"""deliver_state hands the job's state from the lowest rank that holds it to
the ranks that do not, along a chain: every rank starts with its own distinct
state (parameters of several dtypes and sizes 0, 1, 13 and 1031, an int
buffer, optimizer momentum, sampler position, step, extra); each receiver
must end bit-identical to the sender, and a rank that holds the state but is
not the sender must keep its own, untouched (it takes no part).

argv[1]: which ranks hold the state, e.g. "110" (ranks 0 and 1), "all", "none"
(every rank must then get a clear error).
Rank 0 makes the pieces tiny (64 B; the others' setting differs and must not
matter: the sender's travels with the state) so that a buffer crosses in many
of them and a receiver forwards while it receives. A second handover follows
in the same group, from the last rank."""

import sys

import torch
import torch.distributed as dist

from common import done, init
from mccl.elastic import ElasticSampler, State
from mccl.elastic import state as state_mod


class Net(torch.nn.Module):
    def __init__(self, rank: int):
        super().__init__()
        g = torch.Generator().manual_seed(100 + rank)
        self.a = torch.nn.Parameter(torch.randn(1031, dtype=torch.float64, generator=g))
        self.b = torch.nn.Parameter(torch.randn(13, generator=g))
        self.c = torch.nn.Parameter(torch.randn(1, generator=g).to(torch.bfloat16))
        self.d = torch.nn.Parameter(torch.empty(0))
        self.e = torch.nn.Parameter(torch.empty(0, dtype=torch.float16))  # a dtype with no bytes at all
        self.register_buffer("count", torch.arange(7, dtype=torch.int64) * (rank + 3))


def build(rank: int, world: int):
    net = Net(rank)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for p in net.parameters():
        p.grad = torch.full_like(p, rank + 1.5)
    opt.step()  # momentum buffers, distinct per rank
    sampler = ElasticSampler(97, batch=3, seed=rank)
    for _ in range(rank):
        sampler.advance(world)
    st = State(net, opt, sampler, extra={"who": rank})
    st.step = 10 + rank
    return st


def snapshot(st: State):
    sd = st.state_dict()
    flat: list[torch.Tensor] = []
    skeleton = state_mod._split(sd, lambda t: flat.append(t.detach().clone()))
    return skeleton, flat


def same(x, y) -> bool:
    return x[0] == y[0] and len(x[1]) == len(y[1]) and all(
        a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) for a, b in zip(x[1], y[1]))


def check(spec: str) -> None:
    holds = {"all": [True] * world, "none": [False] * world}.get(spec) or [c == "1" for c in spec]
    assert len(holds) == world, (spec, world)
    st = build(rank, world)
    before = snapshot(st)
    if not any(holds):
        try:
            state_mod.deliver_state(st, holds[rank])
            raise AssertionError("no holder was accepted")
        except RuntimeError as e:
            assert f"rank {rank} of {world}: no rank holds the job's state" in str(e), e
        assert same(snapshot(st), before)
        return
    # What the sender holds, as every rank can rebuild it (the states are deterministic per rank).
    src = holds.index(True)
    expect = snapshot(build(src, world))
    got = state_mod.deliver_state(st, holds[rank])
    needed = not all(holds)
    nbytes = state_mod.tensor_bytes(st.state_dict())
    assert got == (nbytes if needed else 0), (got, nbytes, needed)
    after = snapshot(st)
    if holds[rank]:
        assert same(after, before), f"rank {rank} holds the state but it changed"
    else:
        assert same(after, expect), f"rank {rank} did not get rank {src}'s state"
        assert st.step == 10 + src and st.extra == {"who": src}, (st.step, st.extra)


rank, world = init()
state_mod.CHAIN_PIECE_BYTES = 64 if rank == 0 else 1 << 20  # the sender's size rules (it travels with the state)
check(sys.argv[1])
if (sys.argv[1] == "all" or "1" in sys.argv[1]) and world > 1:
    # A second handover in the same group, another rank sending (the last
    # one): the point-to-point sequences of the first must not confuse it.
    check("0" * (world - 1) + "1")
t = torch.tensor([float(rank)])
dist.all_reduce(t)
assert t.item() == world * (world - 1) / 2
done()
