"""A joiner receives the whole live state of an elastic job by
broadcast_state: model, optimizer, sampler position, step, extra, and the
`stateful` objects (an LR scheduler and a GradScaler-like counter here).
Rank 0 has trained 7 steps; every other rank starts fresh and must end
bit-identical to rank 0, its scheduler at rank 0's epoch and learning rate."""

import torch

from common import done, init
from mccl.elastic import ElasticSampler, State
from mccl.elastic.state import broadcast_state


class Counter:
    """Anything with state_dict()/load_state_dict() (a GradScaler, say)."""

    def __init__(self):
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, sd):
        self.n = int(sd["n"])


def build():
    torch.manual_seed(0)
    net = torch.nn.Linear(5, 3).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    counter = Counter()
    state = State(net, opt, ElasticSampler(101, batch=4, seed=3), extra={"note": "x"},
                  stateful={"scheduler": sched, "scaler": counter})
    return state, net, opt, sched, counter


rank, world = init()
state, net, opt, sched, counter = build()
if rank == 0:
    x = torch.randn(8, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for _ in range(7):
        net(x).square().sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        counter.n += 2
        state.sampler.advance(world)
        state.step += 1
sent = broadcast_state(state, src=0)
assert sent > 0
assert state.step == 7 and counter.n == 14, (state.step, counter.n)
assert sched.last_epoch == 7 and sched.get_last_lr() == [0.1 * 0.25], (sched.last_epoch, sched.get_last_lr())
assert opt.param_groups[0]["lr"] == 0.1 * 0.25, opt.param_groups[0]["lr"]
ref = [p.detach().clone() for p in net.parameters()]
torch.distributed.broadcast_object_list(ref, src=0)
for p, q in zip(net.parameters(), ref):
    assert torch.equal(p, q)
# A member whose stateful names differ is refused by name, before anything loads.
other = State(net, opt, ElasticSampler(101, batch=4, seed=3), stateful={"scheduler": sched})
try:
    other.load_state_dict(state.state_dict())
    raise AssertionError("different stateful names were accepted")
except ValueError as e:
    assert "every member must pass the same names" in str(e), e
# Objects without state_dict/load_state_dict are refused by name.
try:
    State(net, opt, ElasticSampler(101, batch=4, seed=3), stateful={"lr": 0.1})
    raise AssertionError("a float was accepted as stateful")
except TypeError as e:
    assert "stateful['lr'] (float)" in str(e), e
done()
