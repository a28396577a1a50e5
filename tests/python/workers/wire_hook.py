"""mccl.Options(wire_dtype=...) for one group, and mccl.hooks'
DDP hook on it: replicas bit-identical, within the wire's rounding of the
same steps with a float32 wire (which the default group keeps)."""

import torch
import torch.distributed as dist
from torch import nn

import mccl
import mccl.hooks
from common import done, init

rank, world = init()
bf16 = mccl.hooks.wire_group("bf16")
# The default group keeps float32; the new group rounds: the same all-reduce differs.
x = torch.randn(1 << 16, generator=torch.Generator().manual_seed(rank))
a, b = x.clone(), x.clone()
dist.all_reduce(a)
dist.all_reduce(b, group=bf16)
scale = x.abs()
dist.all_reduce(scale)  # sum over ranks of |x|: what one rounding per hop is relative to
rel = ((a - b).abs() / scale).max().item()
assert 0 < rel <= (world + 1) * 2 ** -8, rel

# pg_options of another kind, or a bad wire dtype, are refused clearly.
for bad, needle in ((object(), "must be mccl.Options"), (None, None)):
    if bad is None:
        break
    try:
        dist.new_group(backend="mccl", pg_options=bad)
        raise AssertionError("foreign pg_options accepted")
    except TypeError as e:
        assert needle in str(e), e
try:
    mccl.Options(wire_dtype="int4")
    raise AssertionError("wire_dtype int4 accepted")
except ValueError as e:
    assert "is not one of fp32, bf16, fp16" in str(e)


def train(hook_group):
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 512), nn.Tanh(), nn.Linear(512, 8)))
    if hook_group is not None:
        model.register_comm_hook(hook_group, mccl.hooks.wire_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for _ in range(4):
        opt.zero_grad()
        nn.functional.mse_loss(model(torch.randn(16, 64, generator=g)), torch.randn(16, 8, generator=g)).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


plain, hooked = train(None), train(bf16)
everyone = [torch.empty_like(hooked) for _ in range(world)]
dist.all_gather(everyone, hooked)
assert all(torch.equal(e, everyone[0]) for e in everyone), "replicas drifted apart with the wire hook"
diff = (plain - hooked).abs().max().item()
assert 0 < diff < 1e-3, diff
done()
