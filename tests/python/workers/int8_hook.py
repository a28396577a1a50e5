"""The int8 wire (MCCL_WIRE_DTYPE=int8) through the public API, and
mccl.hooks.int8_allreduce_hook's error feedback: results bit-identical on
every rank and within the quantization's error of a float64 reference and of
Gloo; mccl.hooks.int8_round_trip is exactly one rank's contribution; the
hook's residuals telescope across steps; DDP stays close to plain DDP."""

import torch
import torch.distributed as dist
from torch import nn

import mccl.hooks
from common import done, init

rank, world = init()
int8 = mccl.hooks.wire_group("int8", min_bytes=0)
gloo = dist.new_group(backend="gloo")


def same_everywhere(t, what):
    everyone = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(everyone, t)
    assert all(torch.equal(e, everyone[0]) for e in everyone), f"ranks differ: {what}"


for count in (0, 1, 13, 1031, 65537):
    g = torch.Generator().manual_seed(count)
    xs = [torch.randn(count, generator=g) * (1 + r) for r in range(world)]
    got = xs[rank].clone()
    dist.all_reduce(got, op=dist.ReduceOp.AVG, group=int8)
    same_everywhere(got, f"count {count}")
    if count == 0:
        continue
    want = torch.stack([x.double() for x in xs]).mean(0)
    ref = xs[rank].clone()
    dist.all_reduce(ref, op=dist.ReduceOp.AVG, group=gloo)
    rel = ((got.double() - want).norm() / want.norm()).item()
    rel_gloo = ((ref.double() - want).norm() / want.norm()).item()
    assert rel < 1e-2, (count, rel)
    assert rel_gloo < 1e-6, (count, rel_gloo)
    if count > 256:
        assert rel > 0, f"count {count}: nothing was quantized"

# reduce_scatter on the int8 wire: each rank's output block within the
# encoding's error of the float64 sum (the owner's own input exact).
for count in (1, 13, 1031):
    g = torch.Generator().manual_seed(50 + count)
    xs = [torch.randn(world * count, generator=g) * (1 + r) for r in range(world)]
    out = torch.empty(count)
    dist.reduce_scatter_tensor(out, xs[rank].clone(), group=int8)
    want = torch.stack([x.double() for x in xs]).sum(0)[rank * count:(rank + 1) * count]
    rel = ((out.double() - want).norm() / want.norm()).item()
    assert rel < 1e-2, ("reduce_scatter", count, rel)

# float64 takes the wires too (through float32), accumulated in float64.
bf16 = mccl.hooks.wire_group("bf16", min_bytes=0)
for grp, bound in ((int8, 3e-2), (bf16, 1e-2)):
    g = torch.Generator().manual_seed(77)
    xs = [torch.randn(4099, generator=g, dtype=torch.float64) * (1 + r) for r in range(world)]
    got = xs[rank].clone()
    dist.all_reduce(got, group=grp)
    want = torch.stack(xs).sum(0)
    rel = ((got - want).norm() / want.norm()).item()
    assert 0 < rel < bound, ("float64", rel)
    same_everywhere(got, "float64 on a wire")

# One rank's contribution is exactly int8_round_trip: only rank 0 sends
# values, the others zeros, and the sum (re-encoded once more for the
# all-gather, which leaves encoded values as they are) is its round trip.
for count in (13, 1031, 65537):
    x = torch.randn(count, generator=torch.Generator().manual_seed(7)) * 3
    mine = x.clone() if rank == 0 else torch.zeros(count)
    dist.all_reduce(mine, group=int8)
    rt = mccl.hooks.int8_round_trip(x)
    assert torch.equal(mine, rt), (count, (mine - rt).abs().max().item())
    assert not torch.equal(rt, x)


class Bucket:
    """What DDP hands a comm hook (GradBucket's buffer(), index(), parameters())."""

    def __init__(self, t, i, params):
        self.t, self.i, self.params = t, i, params

    def buffer(self):
        return self.t

    def index(self):
        return self.i

    def parameters(self):
        return self.params


# Error feedback across steps: what each rank puts on the wire is its
# gradient plus the last residual; the result is, bit for bit, the average
# the one-process simulation of the int8 wire computes from every rank's
# input; and the residual is what the wire dropped.
from mccl.bench.wire_accuracy import mccl_int8  # noqa: E402

state = mccl.hooks.Int8State()
params = [torch.nn.Parameter(torch.zeros(1))]
gen = torch.Generator().manual_seed(100 + rank)
grads = [torch.randn(5000, generator=gen) * (rank + 1) for _ in range(4)]
residual = torch.zeros(5000)
for step, grad in enumerate(grads):
    before = grad + residual
    out = mccl.hooks.int8_allreduce_hook(state, Bucket(grad.clone(), 0, params)).wait()
    befores = [torch.empty_like(before) for _ in range(world)]
    dist.all_gather(befores, before, group=gloo)
    want = mccl_int8(befores, avg=True)
    assert torch.equal(out, want), f"step {step}: not the average of what the ranks sent"
    key = tuple(id(p) for p in params)
    sent = mccl.hooks.int8_round_trip(before)
    assert torch.equal(state.residuals[key], before - sent), f"step {step}: residual is not what the wire dropped"
    assert state.residuals[key].abs().max() > 0
    residual = state.residuals[key]
    same_everywhere(out, f"hook step {step}")
# A bucket of the same index and size but other parameters starts afresh.
other = [torch.nn.Parameter(torch.zeros(1))]
g = torch.ones(5000) * 0.5
mccl.hooks.int8_allreduce_hook(state, Bucket(g.clone(), 0, other)).wait()
assert torch.equal(state.residuals[tuple(id(p) for p in other)], g - mccl.hooks.int8_round_trip(g))
# float64 buckets are averaged exactly, on the parent group.
g64 = torch.randn(3001, generator=gen, dtype=torch.float64)
out64 = mccl.hooks.int8_allreduce_hook(state, Bucket(g64.clone(), 1, other)).wait()
ref64 = g64.clone()
dist.all_reduce(ref64, op=dist.ReduceOp.AVG, group=gloo)
assert torch.allclose(out64, ref64, rtol=1e-12, atol=1e-12), (out64 - ref64).abs().max()


def train(hook):
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 512), nn.Tanh(), nn.Linear(512, 8)))
    st = None
    if hook:
        st = mccl.hooks.Int8State()
        model.register_comm_hook(st, mccl.hooks.int8_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for _ in range(5):
        opt.zero_grad()
        nn.functional.mse_loss(model(torch.randn(16, 64, generator=g)), torch.randn(16, 8, generator=g)).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), st


plain, _ = train(False)
quant, st = train(True)
assert st.residuals and all(r.abs().sum() > 0 for r in st.residuals.values()), "no error feedback kept"
same_everywhere(quant, "replicas with the int8 hook")
diff = (plain - quant).abs().max().item()
assert 0 < diff < 1e-2, diff
done()
