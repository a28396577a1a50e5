"""deliver_state hands the job's state from the lowest rank that holds it to
the ranks that do not, along a chain: every rank starts with its own distinct
state (parameters of several dtypes and sizes 0, 1, 13 and 1031, an int
buffer, optimizer momentum, sampler position, step, extra); each receiver
must end bit-identical to the sender, and a rank that holds the state but is
not the sender must keep its own, untouched (it takes no part).

argv[1]: which ranks hold the state, e.g. "110" (ranks 0 and 1), "all", "none".
The pieces are made tiny so that every buffer crosses in many of them and a
receiver forwards while it receives."""

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


rank, world = init()
state_mod.CHAIN_PIECE_BYTES = 64
spec = sys.argv[1]
holds = {"all": [True] * world, "none": [False] * world}.get(spec) or [c == "1" for c in spec]
assert len(holds) == world, (spec, world)
st = build(rank, world)
before = snapshot(st)
# What the sender holds, as every rank can rebuild it (the states are deterministic per rank).
if any(holds):
    src = holds.index(True)
    expect = snapshot(build(src, world))
if spec == "none":
    try:
        state_mod.deliver_state(st, holds[rank])
        raise AssertionError("no holder was accepted")
    except RuntimeError as e:
        assert f"rank {rank} of {world}: no rank holds the job's state" in str(e), e
    assert same(snapshot(st), before)
else:
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
# The group is usable afterwards, and the p2p counters agree: one more exchange.
t = torch.tensor([float(rank)])
dist.all_reduce(t)
assert t.item() == world * (world - 1) / 2
done()
