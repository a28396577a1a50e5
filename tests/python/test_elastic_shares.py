"""Shares by speed (mccl.elastic.shares, speed, stragglers, balance) without
processes: the share function's rules, the sampler's exactness with shares,
the moving estimate, the straggler policy, the gradient weighing, and a
simulated fleet whose member slows down."""

from __future__ import annotations

import contextlib
import itertools
import random

import pytest
import torch

from mccl.elastic import Balancer, ElasticSampler, StragglerPolicy
from mccl.elastic import shares as sh
from mccl.elastic.speed import GradWeights, SpeedEstimate
from mccl.elastic.stragglers import StragglerWatch, over, slowdowns


# ---------------------------------------------------------------- split
def test_split_follows_speed_and_sums():
    assert sh.split(128, [40_000, 40_000, 20_000, 10_000]) == [16, 16, 32, 64]
    for total, world in itertools.product([0, 1, 5, 12, 97, 128, 1000], [1, 2, 3, 5, 7]):
        times = [random.Random(total * 31 + world).randint(1, 10**6) for _ in range(world)]
        got = sh.split(total, times)
        assert sum(got) == total and min(got) >= 0 and len(got) == world


def test_equal_times_split_as_the_sampler_always_did():
    # The even split: the first total % world ranks get one more.
    for total, world in itertools.product(range(0, 40), [1, 2, 3, 5, 7]):
        base, extra = divmod(total, world)
        want = [base + (r < extra) for r in range(world)]
        assert sh.split(total, [7] * world) == want, (total, world)
        assert sh.split(total, [0] * world) == want, (total, world)  # nobody measured yet


def test_largest_remainder_rounding_and_rank_ties():
    # Quotas 12 * (1, 2, 4) / 7 = 1.71, 3.43, 6.86: floors 1, 3, 6; the two
    # samples left go to the largest remainders (rank 2, then rank 0).
    assert sh.split(12, [4, 2, 1]) == [2, 3, 7]
    # Two members of equal remainder: the lower rank gets the sample.
    assert sh.split(3, [1, 1]) == [2, 1]
    assert sh.split(5, [2, 1, 2]) == [1, 3, 1]


def test_every_member_gets_one_sample_while_there_are_enough():
    # A member 1000x slower would get 0.03 samples: it gets one, and the
    # rest is shared among the others in proportion.
    got = sh.split(32, [1000, 1, 1, 1])
    assert got[0] == 1 and sum(got) == 32 and sorted(got[1:]) == [10, 10, 11]
    assert sh.split(4, [1000, 1000, 1, 1]) == [1, 1, 1, 1]


def test_fewer_samples_than_members_go_to_the_fastest():
    # The epoch's short last step: the fastest get one each (ties: lower rank).
    assert sh.split(2, [5, 1, 3]) == [0, 1, 1]
    assert sh.split(1, [5, 5, 5]) == [1, 0, 0]
    assert sh.split(0, [5, 1]) == [0, 0]


def test_an_unmeasured_joiner_counts_as_the_median_member():
    # Times 1, 2, 4 are known; the joiner counts as 2 (the median).
    assert sh.filled([10, 20, 40, 0]) == [10, 20, 40, 20]
    # An even count: the slower of the two middle ones.
    assert sh.filled([10, 40, 0]) == [10, 40, 40]
    assert sh.split(70, [10, 20, 40, 0]) == sh.split(70, [10, 20, 40, 20])


def test_split_is_deterministic_and_follows_the_ranks():
    times = [3, 9, 1, 27, 3]
    assert sh.split(101, times) == sh.split(101, list(times))
    # Permuting the members permutes their shares (no ties here).
    times = [3, 9, 1, 27, 5]
    perm = [4, 2, 0, 3, 1]
    got = sh.split(101, times)
    assert sh.split(101, [times[p] for p in perm]) == [got[p] for p in perm]


def test_split_rejects_nonsense():
    with pytest.raises(ValueError):
        sh.split(4, [])
    with pytest.raises(ValueError):
        sh.split(-1, [1])
    with pytest.raises(ValueError):
        sh.split(4, [1, -2])


def test_keep_is_a_hysteresis_on_the_step_time():
    times = [100, 103, 98]
    fresh = sh.split(12, times)
    assert sh.keep([4, 4, 4], fresh, times, 0.05)       # noise: the current shares stay
    assert not sh.keep([4, 4, 4], [2, 3, 7], [4, 2, 1], 0.05)  # a real difference moves them
    assert not sh.keep([4, 4, 4], [3, 3, 3, 3], [1] * 4, 0.05)   # other members
    assert not sh.keep(None, fresh, times, 0.05)
    assert not sh.keep([0, 6, 6], [4, 4, 4], [1, 1, 1], 10.0)    # the one-sample minimum


def test_micro_batches_chunks_and_factors():
    assert sh.micro_counts([3, 7, 14], 4) == [1, 2, 4]
    assert sh.micro_counts([0, 7, 14], 4) == [1, 2, 4]  # a member without samples still reduces
    assert sh.micro_counts([3, 7, 14], 4, common=True) == [4, 4, 4]  # FSDP2
    assert sh.chunks(list(range(7)), 2) == [[0, 2, 4, 6], [1, 3, 5]]
    assert sh.chunks([1, 2], 4) == [[1], [2], [], []]
    assert sh.factor(3, 24, 3) == 3 * 3 / 24 and sh.factor(0, 0, 2) == 0.0


# ---------------------------------------------------------------- sampler
@pytest.mark.parametrize("worlds", [[4, 6, 5, 4], [1, 3, 7, 2], [5]])
def test_sampler_with_shares_covers_each_epoch_exactly_once(worlds):
    n, batch = 97, 4
    s = ElasticSampler(n, batch, seed=3)
    seen: dict[int, list[int]] = {}
    rng = random.Random(5)
    step = 0
    while s.state.epoch < 3:
        w = worlds[(step // 5) % len(worlds)]
        micro = 1 + step % 3
        times = [rng.randint(1, 50) if rng.random() > 0.2 else 0 for _ in range(w)]  # joiners unmeasured
        shares = sh.split(s.step_size(w, micro), times)
        got = [s.indices(r, w, micro, shares) for r in range(w)]
        assert [len(g) for g in got] == shares
        # Contiguous slices of the step in rank order: the same samples as the even split.
        assert [i for g in got for i in g] == [i for r in range(w) for i in s.indices(r, w, micro)]
        seen.setdefault(s.state.epoch, []).extend(i for g in got for i in g)
        s.advance(w, micro)
        step += 1
    for epoch, idx in seen.items():
        assert sorted(idx) == list(range(n)), f"epoch {epoch}: dropped or repeated samples"


def test_sampler_refuses_shares_that_do_not_add_up_and_keeps_speeds():
    s = ElasticSampler(97, 4)
    with pytest.raises(ValueError, match="summing to the step's 8 samples"):
        s.indices(0, 2, 1, [3, 4])
    with pytest.raises(ValueError):
        s.indices(0, 2, 1, [9, -1])
    assert s.state_dict() == {"epoch": 0, "position": 0}  # no speeds: as before
    s.state.speeds["mac-1:12:ab"] = 40_000
    t = ElasticSampler(97, 4)
    t.load_state_dict(s.state_dict())
    assert t.state.speeds == {"mac-1:12:ab": 40_000}
    t.load_state_dict({"epoch": 1, "position": 8})  # a checkpoint from before shares
    assert t.state.speeds == {} and t.state.position == 8


# ---------------------------------------------------------------- the estimate
def test_the_estimate_averages_noise_and_jumps_with_a_step_change():
    e = SpeedEstimate(alpha=0.3, jump=1.5)
    assert e.ns == 0
    e.add(0.4, 10)                      # 40 ms per sample
    assert e.ns == 40_000_000
    e.add(0.44, 10)                     # noise: moves by alpha
    assert e.ns == round((0.04 + 0.3 * 0.004) * 1e9)
    e.add(1.3, 10)                      # its person started a render: 3x
    assert e.ns == 130_000_000
    e.add(0.0, 10)
    e.add(0.5, 0)                       # nothing measured: no change
    assert e.ns == 130_000_000
    assert 2.7 < e.time_constant_steps < 2.9
    with pytest.raises(ValueError):
        SpeedEstimate(alpha=0.0)


# ---------------------------------------------------------------- stragglers
def test_straggler_policy_judges_against_the_median_member():
    assert slowdowns([10, 10, 20, 40]) == [1.0, 1.0, 2.0, 4.0]  # the faster middle one: 10
    policy = StragglerPolicy(max_slowdown=3.0, patience_steps=3, min_members=2)
    assert over(policy, [10, 10, 20, 40]) == [3]
    assert over(policy, [10, 10, 50, 40]) == [2, 3]  # slowest first
    assert over(StragglerPolicy(3.0, 3, min_members=3), [10, 10, 50, 40]) == [2]  # three stay
    assert over(policy, [10, 10, 29]) == []
    w = StragglerWatch(policy)
    assert [w.heard([10, 10, 40], 2) for _ in range(2)] == [None, None]
    assert w.note() == "4.0x the median for 2/3 steps"
    w.heard([10, 10, 20], 2)             # back within the limit: the count starts again
    assert w.count == 0 and w.note() is None
    got = [w.heard([10, 10, 40], 2) for _ in range(4)]
    assert got[:2] == [None, None] and got[2].startswith("straggler: 4.0x the median") and got[3] is None
    assert w.note().startswith("leaving: straggler")
    with pytest.raises(ValueError):
        StragglerPolicy(max_slowdown=1.0)


# ---------------------------------------------------------------- the weighing
def test_weighed_gradients_average_to_the_global_mean_exactly():
    # Three members with 2, 5 and 9 of the step's 16 samples, each with a
    # loss that is a mean over its own: weighed by world * n / N and
    # averaged over the world, their gradients are the global batch mean's.
    torch.manual_seed(0)
    x, y = torch.randn(16, 5, dtype=torch.float64), torch.randn(16, 1, dtype=torch.float64)
    net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    weights = GradWeights()
    weights.attach(net)
    counts, world = [2, 5, 9], 3
    total = [torch.zeros_like(p) for p in net.parameters()]
    lo = 0
    for n in counts:
        net.zero_grad()
        with weights.weighing(sh.factor(n, 16, world)):
            torch.nn.functional.mse_loss(net(x[lo:lo + n]), y[lo:lo + n]).backward()
        lo += n
        for t, p in zip(total, net.parameters()):
            t += p.grad / world
    net.zero_grad()
    torch.nn.functional.mse_loss(net(x), y).backward()
    for t, p in zip(total, net.parameters()):
        assert torch.allclose(t, p.grad, rtol=1e-12, atol=1e-15)
    assert weights.last_grad_t > 0 and weights.factor == 1.0
    weights.detach()
    net.zero_grad()
    with weights.weighing(5.0):
        torch.nn.functional.mse_loss(net(x), y).backward()
    assert torch.allclose(next(net.parameters()).grad, total[0], rtol=1e-12)  # detached: not scaled


# ---------------------------------------------------------------- a simulated fleet
def _simulate(speeds, steps, slow_at=None, slow_member=None, factor=3.0, tolerance=0.05):
    """Members of the given speeds (samples per ms) sharing 64 samples each
    per step; the exchange lags one step as in Job (the estimate a member
    sends at step s's boundary is the one after step s-1). Returns each
    step's throughput as a share of the sum of the speeds at that step."""
    world = len(speeds)
    bals = [Balancer(tolerance=tolerance) for _ in range(world)]
    sent = [0] * world
    out = []
    for s in range(steps):
        speed = list(speeds)
        if slow_at is not None and s >= slow_at:
            speed[slow_member] /= factor
        counts = [b.counts(64 * world, list(range(world)), key=0) for b in bals]
        assert all(c == counts[0] for c in counts), "members computed different shares"
        c = counts[0]
        times = [n / v for n, v in zip(c, speed)]
        out.append(sum(c) / max(times) / sum(speed))
        values = list(sent)  # issued before this step's compute
        for r, b in enumerate(bals):
            b.estimate.add(times[r] / 1000, c[r])
            sent[r] = b.estimate.ns
        for r, b in enumerate(bals):
            b.heard(values, list(range(world)), r)
    return out


def test_a_member_slowed_3x_is_rebalanced_within_three_boundaries():
    eff = _simulate([1, 1, 2, 4], 30, slow_at=15, slow_member=3)
    assert min(eff[3:15]) > 0.97, eff               # balanced (equal shares: 50 %)
    assert eff[15] < 0.9                             # the first slow step
    assert all(e >= 0.9 for e in eff[17:]), eff      # back to 90 % two boundaries later
    eff = _simulate([1, 1, 2, 4], 30, slow_at=15, slow_member=0)
    assert all(e >= 0.9 for e in eff[17:]), eff


def test_equal_members_keep_the_even_split():
    bal = Balancer()
    bal.heard([40_000, 41_000, 39_500], ["a", "b", "c"], 0)
    assert bal.counts(12, ["a", "b", "c"], key=3) == [4, 4, 4]
    # A joiner (unmeasured) counts as the median; members that left are dropped.
    bal.heard([40_000, 0, 10_000], ["a", "d", "c"], 0)
    assert bal.table == {"a": 40_000, "c": 10_000}
    assert bal.counts(12, ["a", "d", "c"], key=4) == sh.split(12, [40_000, 40_000, 10_000])


def test_job_takes_shares_as_an_option():
    import torch.distributed as dist

    import mccl.elastic as elastic
    assert elastic.Job(dist.HashStore(), "eq", member_id="a")._balance is None  # today's job: nothing added
    assert elastic.Job(dist.HashStore(), "sp", member_id="b", shares="speed")._balance is not None
    with pytest.raises(ValueError, match="shares must be 'equal' or 'speed'"):
        elastic.Job(dist.HashStore(), "x", member_id="c", shares="fast")
    with pytest.raises(ValueError, match="a straggler policy needs shares='speed'"):
        elastic.Job(dist.HashStore(), "y", member_id="d", straggler=StragglerPolicy())


def test_ddp_micro_batches_of_unequal_size_are_weighed_exactly():
    # One member (a world of one, gloo) with 7 of the step's 7 samples in
    # micro-batches of 4 and 3 under no_sync: the comm hook and the rescale
    # between micro-batches give the gradient of the mean over all 7.
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(1)
        x, y = torch.randn(7, 5, dtype=torch.float64), torch.randn(7, 1, dtype=torch.float64)
        net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
        want = [torch.autograd.grad(torch.nn.functional.mse_loss(net(x), y), list(net.parameters()))]
        model = torch.nn.parallel.DistributedDataParallel(net)
        weights = GradWeights()
        assert weights.attach(model) and not weights.attach(model)
        weights.new_step()
        for part, last in (([0, 2, 4, 6], False), ([1, 3, 5], True)):
            with weights.weighing(sh.factor(len(part), 7, 1)), \
                    (contextlib.nullcontext() if last else model.no_sync()):  # around the forward too
                torch.nn.functional.mse_loss(model(x[part]), y[part]).backward()
        for g, p in zip(want[0], net.parameters()):
            assert torch.allclose(p.grad, g, rtol=1e-12, atol=1e-15), (p.grad - g).abs().max()
        assert weights.last_grad_t > 0
    finally:
        dist.destroy_process_group()


def _fsdp2_weighable() -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return hasattr(FSDPModule, "set_custom_reduce_scatter") and hasattr(FSDPModule, "set_all_reduce_hook")


@pytest.mark.skipif(not _fsdp2_weighable(), reason="FSDP2's custom reduce-scatter needs a newer torch")
def test_fsdp2_alone_weighs_its_micro_batches_without_a_reduce_scatter():
    # FSDP2 in a group of one copies the gradient instead of calling the
    # reduce-scatter: the all-reduce hook weighs it (micro-batches of 4, 3
    # and an empty one, as FSDP2's common micro-batch count gives).
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(2)
        x, y = torch.randn(7, 5, dtype=torch.float64), torch.randn(7, 1, dtype=torch.float64)
        net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
        want = torch.autograd.grad(torch.nn.functional.mse_loss(net(x), y), list(net.parameters()))
        fully_shard(net[0])
        fully_shard(net)
        weights = GradWeights()
        assert weights.attach(net) and weights.sharded
        weights.new_step()
        for part in ([0, 2, 4, 6], [1, 3, 5], []):
            with weights.weighing(sh.factor(len(part), 7, 1)):
                out = net(x[part])
                # An empty batch's mean is NaN: its weight 0 must still give zeros.
                torch.nn.functional.mse_loss(out, y[part]).backward()
        for g, p in zip(want, net.parameters()):
            got = p.grad.full_tensor()
            assert torch.allclose(got, g, rtol=1e-12, atol=1e-15), (got - g).abs().max()
    finally:
        dist.destroy_process_group()


def test_a_member_with_other_shares_has_another_signature():
    # Shares by speed widen the boundary's all_reduce: a joiner with equal
    # shares is refused at admission (the signature), not met by a
    # collective of another size.
    import torch.distributed as dist

    import mccl.elastic as elastic

    def sig(shares):
        net = torch.nn.Linear(3, 2).double()
        job = elastic.Job(dist.HashStore(), "sig", member_id="a", shares=shares)
        job._know_state(elastic.State(net, torch.optim.SGD(net.parameters(), lr=0.1), ElasticSampler(10, 2)))
        return job._sig_lines, job._sig

    (eq_lines, eq), (sp_lines, sp) = sig("equal"), sig("speed")
    assert eq != sp and sp_lines == eq_lines + ["job: shares=speed"]
