"""mccl.elastic's DiLoCo (DiLoCoState): the schedule of streamed fragments,
the round's data plan, and end to end on loopback: an elastic job with a
join, a graceful leave and a kill -9, whose global parameters equal a
float64 one-process replay (elastic_fleet.replay_diloco) and whose members
trained every sample of an epoch exactly once; streaming with its delayed
updates against the replay; the wire dtype the outer all-reduce ran on."""

from __future__ import annotations

import os
import random
import re
import signal

import pytest
import torch

from elastic_fleet import Fleet, _members, _store, diloco_log, replay_diloco
from mccl.elastic import ElasticSampler
from mccl.elastic.diloco_plan import RoundPlan, Schedule, split


# ---------------------------------------------------------------- schedule
def test_plain_diloco_syncs_once_at_the_round_end():
    s = Schedule(H=10)
    assert s.tau == 0 and s.applies == [10] and s.issues == [10]
    assert [s.events(j) for j in range(10)] == [[]] * 10
    assert s.events(10) == [("issue", 0), ("apply", 0)]


def test_streaming_staggers_fragments_and_applies_each_after_its_overlap():
    s = Schedule(H=12, fragments=4)  # default overlap: the whole gap (3 inner steps)
    assert s.tau == 3 and s.applies == [3, 6, 9, 12] and s.issues == [0, 3, 6, 9]
    timeline = {j: s.events(j) for j in range(13) if s.events(j)}
    # One all-reduce on the wire at a time: each is applied, then the next issued.
    assert timeline == {0: [("issue", 0)], 3: [("apply", 0), ("issue", 1)], 6: [("apply", 1), ("issue", 2)],
                        9: [("apply", 2), ("issue", 3)], 12: [("apply", 3)]}
    s1 = Schedule(H=12, fragments=4, overlap=1)
    assert s1.issues == [2, 5, 8, 11] and s1.events(3) == [("apply", 0)]
    s0 = Schedule(H=12, fragments=4, overlap=0)
    assert s0.events(6) == [("issue", 1), ("apply", 1)]
    uneven = Schedule(H=10, fragments=3)
    assert uneven.applies == [3, 7, 10] and uneven.tau == 3 and uneven.applies[-1] == 10
    with pytest.raises(ValueError, match="overlap 4 must be between 0 and 3"):
        Schedule(H=12, fragments=4, overlap=4)
    with pytest.raises(ValueError):
        Schedule(H=3, fragments=4)


def test_fragments_cut_the_flattened_parameters_evenly_even_inside_one_tensor():
    assert split([10], 3) == [[(0, 0, 3)], [(0, 3, 6)], [(0, 6, 10)]]
    parts = split([4, 5, 1, 7], 2)
    assert parts == [[(0, 0, 4), (1, 0, 4)], [(1, 4, 5), (2, 0, 1), (3, 0, 7)]]
    assert sum(b - a for f in parts for _, a, b in f) == 17


# ---------------------------------------------------------------- data
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_plan_keeps_every_epoch_exact_across_deaths_joins_and_inner_steps(seed):
    # Rounds of H inner steps with a world that changes between rounds and
    # members that die inside one (their samples of that round are owed to
    # the next): every sample of every finished epoch is contributed once.
    rng = random.Random(seed)
    n, batch, H = 53, 3, 4
    sampler, owed = ElasticSampler(n, batch, seed=seed), []
    contributed: dict[int, list[int]] = {}
    for _ in range(60):
        world = rng.randint(1, 5)
        plan = RoundPlan(sampler, owed, world, H)
        dead = [r for r in range(world) if rng.random() < 0.2]
        for k in range(H):
            for r in range(world):
                if r not in dead:
                    for e, i in zip(plan.epoch[k, r].tolist(), plan.idx[k, r].tolist()):
                        contributed.setdefault(e, []).append(i)
        owed = plan.owed_after(dead)
        sampler.load_state_dict(plan.after)
    done = [e for e in contributed if e < sampler.state.epoch and all(oe != e for oe, _ in owed)]
    assert len(done) >= 5
    for e in done:
        assert sorted(contributed[e]) == list(range(n)), f"epoch {e}: samples dropped or seen twice"
    # Within a round, every member's inner steps take distinct samples.
    plan = RoundPlan(ElasticSampler(n, batch), [], 3, H)
    flat = plan.idx.reshape(-1).tolist()
    assert len(set(flat)) == len(flat) == H * 3 * batch


# ---------------------------------------------------------------- end to end
def _fleet(tmp_path, port, extra):
    return Fleet(f"127.0.0.1:{port}", tmp_path, extra=extra, script="diloco_worker.py")


def _rounds_done(fleet) -> int:
    found = [int(m.group(1)) for i in range(len(fleet.procs)) for m in re.finditer(r"OUTER (\d+) ", fleet.text(i))]
    return max(found, default=-1)


def _inner_step(fleet, r: int) -> int:
    """The latest inner step any member logged in round r (-1: none yet)."""
    found = [int(m.group(1)) for i in range(len(fleet.procs))
             for m in re.finditer(rf"^INNER {r} (\d+) ", fleet.text(i), re.M)]
    return max(found, default=-1)


def _world(fleet) -> int:
    log = diloco_log(fleet)
    return len(log["rounds"][max(log["rounds"])][1]) if log["rounds"] else 0


def _check(fleet, tmp_path, survivors, H, **schedule):
    fleet.wait_for("the end", lambda: all(fleet.procs[i].poll() is not None for i in survivors), 120)
    fleet.assert_ok(survivors)
    # Every member that ended with the job holds the same global parameters, bit for bit.
    digests = {re.search(r"DONE step \d+ .* globals (\w+)", fleet.text(i)).group(1) for i in survivors}
    assert len(digests) == 1, digests
    log = diloco_log(fleet)
    got = torch.load(tmp_path / "final.pt")["globals"]
    want = replay_diloco(log, H, **schedule)
    for f, (g, w) in enumerate(zip(got, want)):
        assert torch.allclose(g, w, rtol=1e-9, atol=1e-12), (f, (g - w).abs().max())
    return log


@pytest.mark.slow
def test_diloco_job_joins_leaves_and_crashes_at_outer_boundaries_and_matches_a_replay(tmp_path):
    # 3 members (H = 5, plain DiLoCo, the fp32 wire so float64 sums are
    # exact); one joins (admitted at a round's end, with the global state
    # and the outer momentum, a fresh inner optimizer), one leaves on
    # SIGTERM (after its round's outer step), one is killed (its inner
    # steps since the last outer step are lost, and its samples of that
    # round owed to the next). The global parameters equal the float64
    # replay of the logged rounds; no outer step is lost; every finished
    # epoch's samples were contributed exactly once.
    H = 5
    master, port = _store()
    fleet = _fleet(tmp_path, port, ["--H", str(H), "--sleep-ms", "30"])
    try:
        for _ in range(3):
            fleet.start(initial=3)
        fleet.wait_for("3 members, 2 rounds", lambda: _rounds_done(fleet) >= 1)
        joiner = fleet.start()
        fleet.wait_for("the join", lambda: _world(fleet) == 4)
        fleet.procs[1].send_signal(signal.SIGTERM)
        fleet.wait_for("the leave", lambda: "LEFT" in fleet.text(1) and _world(fleet) == 3)
        mark = _rounds_done(fleet)
        fleet.wait_for("a round after it", lambda: _rounds_done(fleet) > mark)
        os.killpg(fleet.procs[2].pid, signal.SIGKILL)
        fleet.wait_for("the crash", lambda: _world(fleet) == 2, 90)
        stop = (max(diloco_log(fleet)["rounds"]) + 3) * H
        _members(port).request_end(stop)
        log = _check(fleet, tmp_path, [0, joiner], H)
        fleet.assert_ok([1])
        worlds = [len(log["rounds"][r][1]) for r in sorted(log["rounds"])]
        assert {3, 4, 2} <= set(worlds), worlds
        # No outer step lost: every round that started was applied (the
        # crash's round with the survivors alone).
        assert sorted(r for r, _ in log["outer"]) == sorted(log["rounds"]), (log["outer"], log["rounds"])
        crashed = [r for r, (_, ids) in log["rounds"].items() if len(log["outer"][(r, 0)][2]) < len(ids)]
        assert len(crashed) == 1 and log["outer"][(crashed[0], 0)][1] == 2, log["outer"]
        # The sampler: every sample of an epoch, contributed once.
        seen: dict[int, list[int]] = {}
        for (r, m), steps in log["inner"].items():
            if m in log["outer"][(r, 0)][2]:
                assert sorted(k for k, _ in steps) == list(range(H)), (r, m, steps)
                for _, pairs in steps:
                    for e, i in pairs:
                        seen.setdefault(e, []).append(i)
        import elastic_worker as w
        assert len(seen) >= 3, seen.keys()
        for e in sorted(seen)[:-1]:  # the last epoch is unfinished
            assert sorted(seen[e]) == list(range(w.DATA)), f"epoch {e}"
        log0 = fleet.text(0)
        assert re.search(r"CHANGE gen \d+ join world 4 stall \S+ bytes [1-9]", log0), log0[-3000:]
        assert re.search(r"CHANGE gen \d+ crash world 2", log0), log0[-3000:]
    finally:
        fleet.kill_all()
        del master


@pytest.mark.slow
@pytest.mark.parametrize("merge", ["rebase", "mix"])
def test_streaming_fragments_apply_their_delayed_outer_updates_as_replayed(tmp_path, merge):
    # 3 members, H = 6 in 3 fragments: fragment p is issued at inner step
    # 2p and applied 2 steps later, its all-reduce overlapping those inner
    # steps; the local fragment then takes the new global one as `merge`
    # says. Against the float64 replay of the same schedule.
    H, P = 6, 3
    master, port = _store()
    fleet = _fleet(tmp_path, port, ["--H", str(H), "--fragments", str(P), "--merge", merge, "--sleep-ms", "5",
                                    "--steps", str(5 * H)])
    try:
        for _ in range(3):
            fleet.start(initial=3)
        log = _check(fleet, tmp_path, [0, 1, 2], H, fragments=P, merge=merge)
        points = sorted({(f, p) for (_, f), (p, _, _) in log["outer"].items()})
        assert points == [(0, 2), (1, 4), (2, 6)], points
        # The first round's fragment 0 was issued before any inner step: nothing to sum.
        assert log["outer"][(0, 0)][1] == 0 and log["outer"][(1, 0)][1] == 3
    finally:
        fleet.kill_all()
        del master


@pytest.mark.slow
@pytest.mark.parametrize("wire,algo,bound", [("bf16", r"(ring|pairwise)_wire \(bf16\)", 2.0 ** -8),
                                             ("int8", "pairwise_int8", 2.0 ** -6)])
def test_the_outer_all_reduce_runs_on_the_wire_dtype_asked_for(tmp_path, wire, algo, bound):
    # The outer all-reduce's group reports the wire path MCCL chose for the
    # largest fragment. One round: the global parameters differ from the
    # fp32 wire's replay by the wire's rounding of the pseudo-gradients
    # (bf16: 8 bits of mantissa; int8: a scale per 256 values), measured
    # against the size of the outer update, and not by more.
    import elastic_worker as w
    H = 4
    master, port = _store()
    fleet = _fleet(tmp_path, port, ["--H", str(H), "--wire", wire, "--sleep-ms", "2", "--steps", str(H)])
    try:
        for _ in range(2):
            fleet.start(initial=2)
        fleet.wait_for("the end", lambda: all(p.poll() is not None for p in fleet.procs), 120)
        fleet.assert_ok([0, 1])
        assert re.search(rf"DONE step {H} wire '{algo}", fleet.text(0)), fleet.text(0)[-2000:]
        got = torch.load(tmp_path / "final.pt")["globals"][0]
        want = replay_diloco(diloco_log(fleet), H)[0]
        start = torch.cat([p.detach().reshape(-1) for p in w.model().parameters()])
        err = float((got - want).abs().max() / (want - start).abs().max())
        assert 0 < err < bound, err
    finally:
        fleet.kill_all()
        del master


@pytest.mark.slow
def test_streaming_job_survives_a_kill_with_a_fragment_in_flight_and_matches_a_replay(tmp_path):
    # Streaming (H = 6 in 3 fragments, one all-reduce always in flight): a
    # joiner comes at a round's end, then a member is killed mid-round. The
    # survivors find out at the fragment's all-reduce, recover, agree where
    # the round stands (the one behind trains the inner steps it lacks) and
    # issue the fragment in flight again without the dead; the fragments
    # applied before the kill keep its contribution. The global parameters
    # equal the replay of the logged applications.
    H, P = 6, 3
    master, port = _store()
    # 100 ms inner steps: the kill lands mid-round, with fragments of the
    # round still to apply, however late this process sees the round begin.
    fleet = _fleet(tmp_path, port, ["--H", str(H), "--fragments", str(P), "--sleep-ms", "100"])
    try:
        for _ in range(3):
            fleet.start(initial=3)
        fleet.wait_for("a round", lambda: _rounds_done(fleet) >= 1)
        joiner = fleet.start()
        fleet.wait_for("the join", lambda: _world(fleet) == 4)
        mark = _rounds_done(fleet)
        # A round of the four, its first inner step done (its last fragment
        # applies at inner step H): the kill leaves applications to make.
        fleet.wait_for("a round after it, one inner step in", lambda: _inner_step(fleet, mark + 1) >= 0)
        os.killpg(fleet.procs[1].pid, signal.SIGKILL)
        fleet.wait_for("the crash", lambda: _world(fleet) == 3, 90)
        stop = (max(diloco_log(fleet)["rounds"]) + 2) * H
        _members(port).request_end(stop)
        log = _check(fleet, tmp_path, [0, 2, joiner], H, fragments=P)
        short = [k for k, (_, n, alive) in log["outer"].items() if len(alive) == 3 and len(log["rounds"][k[0]][1]) == 4]
        assert short, log["outer"]  # applications of the crash's round, without the dead
        assert "after the recovery" in fleet.text(0), fleet.text(0)[-3000:]
    finally:
        fleet.kill_all()
        del master


# ---------------------------------------------------------------- one process
@pytest.fixture
def one_rank():
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _state(merge="rebase", fragments=2, H=4, wire="fp32"):
    import diloco_worker as dw
    return dw.make_state(H, fragments, None, wire, merge)


def _train(st, k: int):
    """Stands in for k inner steps: moves every local parameter."""
    with torch.no_grad():
        for i, p in enumerate(st.params):
            p.add_(0.01 * (k + 1) * (i + 1))
    for _ in range(k):
        st.trained()


def _same(a, b) -> None:
    for pa, pb in zip(a.params, b.params):
        assert torch.equal(pa, pb)
    assert all(torch.equal(x, y) for x, y in zip(a.globals, b.globals))
    sa, sb = a.outer.state_dict()["state"], b.outer.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        assert all(torch.equal(sa[k][n], sb[k][n]) for n in sa[k] if torch.is_tensor(sa[k][n]))


@pytest.mark.parametrize("merge", ["rebase", "mix"])
def test_a_lagging_survivor_merges_the_senders_outer_update_as_applying_it_would(one_rank, merge):
    # Two copies of one member: both issue fragment 0's sync and train the
    # overlapped steps; A applies it, B fails before that and takes A's state
    # in the recovery (load_state_dict of a member that trains in a round).
    # B's local and global parameters must then equal A's.
    a, b = _state(merge), _state(merge)
    for st in (a, b):
        st.start_round(("m",))
        _train(st, 2)
        st.hold(0)
        st.issue(0, None)
        _train(st, 2)
    a.apply(0, 2)
    b.lost()
    b.load_state_dict(a.state_dict())
    _same(a, b)
    assert b.done_round == a.done_round and 0 not in b.pending and b.at == a.at
    # What was merged: the outer step moved the global fragment, and the
    # local one kept the two overlapped steps (rebase) or half of itself (mix).
    assert not torch.equal(a.globals[0], _state().globals[0])


@pytest.mark.parametrize("merge", ["rebase", "mix"])
def test_an_outer_step_worked_out_before_a_failure_is_not_applied_twice(one_rank, merge):
    # The outer thread has the fragment's outer step ready (the sum came in),
    # then the group fails before the apply point: the sync is issued again
    # and applied once. The member must equal one whose sync never failed,
    # bit for bit, its outer momentum included; and nothing of the state
    # moved before the apply.
    a, b = _state(merge), _state(merge)
    for st in (a, b):
        st.start_round(("m",))
        _train(st, 2)
        st.hold(0)
        st.issue(0, None)
    b.pending[0].prepared.result()  # worked out
    before = [g.detach().clone() for g in b.globals], [p.detach().clone() for p in b.params]
    assert all(torch.equal(x, y) for x, y in zip(before[0], b.globals))
    assert all(torch.equal(x, y) for x, y in zip(before[1], b.params))
    assert not b.outer.state  # the outer optimizer has not stepped
    b.lost()
    b.issue(0, None)  # the recovery issues it again (a group of one: the same sum)
    for st in (a, b):
        _train(st, 2)
        st.apply(0, 4)
    _same(a, b)
    assert not torch.equal(a.globals[0], before[0][0])  # the outer step did move the global fragment


def test_the_outer_thread_steps_a_copy_of_the_optimizer_with_the_issue_points_hyperparameters(one_rank):
    # A scheduler wraps the optimizer's step and changes its lr: the outer
    # thread runs the optimizer's own step (not the wrapper, which would step
    # the original), with the lr as it was at the issue point (the same on
    # every member, whenever the sum arrives), and the original's state is
    # what apply() swapped in.
    import warnings
    a, b = _state(), _state()
    sched = torch.optim.lr_scheduler.StepLR(b.outer, step_size=1, gamma=0.5)
    for f in range(2):
        if f == 1:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                sched.step()  # no "lr_scheduler.step() before optimizer.step()": apply stepped it
            for g in a.outer.param_groups:
                g["lr"] *= 0.5
        for st in (a, b):
            if f == 0:
                st.start_round(("m",))
            _train(st, 2)
            st.hold(f)
            st.issue(f, None)
            if st is b:
                st.outer.param_groups[0]["lr"] *= 10  # after the issue point: not this step's
            _train(st, 2)
            st.apply(f, 4 * (f + 1))
            if st is b:
                st.outer.param_groups[0]["lr"] /= 10
    assert b.outer.param_groups[0]["lr"] == a.outer.param_groups[0]["lr"] < _state().outer.param_groups[0]["lr"]
    _same(a, b)
    assert [p is g for p, g in zip(b.outer.param_groups[0]["params"], b.globals)] == [True, True]
    assert set(b.outer.state) == set(b.globals)


def _state_with(outer_cls, **kw):
    import diloco_worker as dw
    import mccl.elastic as elastic
    net = dw.w.model()
    inner = torch.optim.SGD(net.parameters(), lr=dw.INNER_LR)
    return elastic.DiLoCoState(net, inner, outer_cls(net.parameters(), **kw),
                               elastic.ElasticSampler(dw.w.DATA, batch=dw.w.BATCH, seed=dw.w.SEED), H=4,
                               wire_dtype="fp32", fragments=2)


class _MySGD(torch.optim.SGD):
    """Not a torch.optim class: apply() steps it itself."""


@pytest.mark.parametrize("outer", ["adam", "sgd-subclass"])
def test_an_optimizer_the_outer_thread_does_not_copy_is_stepped_in_place_to_the_same_bits(one_rank, outer):
    # Adam with a hook of its own, or an SGD subclass: apply() steps the
    # optimizer itself on the training thread (hooks run, attributes a copy
    # would lose stay); the result equals the outer thread's copy of a stock
    # one, bit for bit, outer state included.
    if outer == "adam":
        a, b = _state_with(torch.optim.Adam, lr=0.1), _state_with(torch.optim.Adam, lr=0.1)
        calls = []
        b.outer.register_step_pre_hook(lambda opt, args, kw: calls.append(1))
    else:
        a = _state_with(torch.optim.SGD, lr=0.7, momentum=0.9, nesterov=True)
        b = _state_with(_MySGD, lr=0.7, momentum=0.9, nesterov=True)
        calls = None
    assert a._steps_off_thread() and not b._steps_off_thread()
    for st in (a, b):
        st.start_round(("m",))
    for f in range(2):
        for st in (a, b):
            _train(st, 2)
            st.hold(f)
            st.issue(f, None)
            _train(st, 2)
            st.apply(f, 4 * (f + 1))
        assert b.pending == {} and not b.pending
    _same(a, b)
    if calls is not None:
        assert len(calls) == 2


def test_a_joiner_takes_the_global_parameters_not_the_senders_inner_progress(one_rank):
    a, c = _state(), _state()
    a.start_round(("m",))
    _train(a, 3)
    a.hold(0)
    a.issue(0, None)
    a.apply(0, 3)
    c.load_state_dict(a.state_dict())
    flat = torch.cat([p.detach().reshape(-1) for p in c.params])
    assert torch.equal(flat, torch.cat([g.detach() for g in a.globals]))
    assert not torch.equal(flat, torch.cat([p.detach().reshape(-1) for p in a.params]))  # a trained on
    assert c.at == c.END and c.step == a.step and not c.pending
    assert c.outer.state_dict()["state"].keys() == a.outer.state_dict()["state"].keys()  # the outer momentum


def test_a_member_that_trained_nothing_since_its_last_issue_adds_nothing(one_rank):
    # The first round's first fragment of a streamed job is issued before any
    # inner step: no member contributes, the count is 0, the outer step is skipped.
    st = _state(fragments=2, H=4)
    st.start_round(("m",))
    before = [g.clone() for g in st.globals]
    st.hold(0)
    assert not st.pending[0].contributes
    st.issue(0, None)
    rec = st.apply(0, 2)
    assert rec["count"] == 0 and torch.equal(st.globals[0], before[0])
    assert st.outer.state_dict()["state"] == {}


@pytest.mark.slow
def test_a_dormant_diloco_job_resumes_with_its_outer_momentum_and_data_position(tmp_path):
    # Dawn: both members leave (SIGTERM) and leave at the same round's end:
    # the job is dormant, its global state in the checkpoint folder. Dusk: a
    # new member resumes it there (the global parameters, the outer
    # momentum, the data position, the step) with a fresh inner optimizer.
    # The result equals the replay of all the logged rounds.
    H = 5
    master, port = _store()
    fleet = _fleet(tmp_path, port, ["--H", str(H), "--sleep-ms", "30", "--checkpoint-dir", str(tmp_path / "ckpt")])
    try:
        for _ in range(2):
            fleet.start(initial=2)
        fleet.wait_for("2 rounds", lambda: _rounds_done(fleet) >= 1)
        for i in (0, 1):
            fleet.procs[i].send_signal(signal.SIGTERM)
        fleet.wait_for("dawn", lambda: all(fleet.procs[i].poll() is not None for i in (0, 1)), 60)
        fleet.assert_ok([0, 1])
        left = {int(m.group(1)) for i in (0, 1) for m in re.finditer(r"LEFT at step (\d+)", fleet.text(i))}
        assert len(left) == 1 and left.pop() % H == 0, (fleet.text(0)[-1500:], fleet.text(1)[-1500:])
        dusk = fleet.start(create=False)
        fleet.wait_for("the resumed job's first round", lambda: "ROUND" in fleet.text(dusk))
        stop = (max(diloco_log(fleet)["rounds"]) + 2) * H
        _members(port).request_end(stop)
        log = _check(fleet, tmp_path, [dusk], H)
        assert "dormant" in fleet.text(0) + fleet.text(1)
        assert len({ids for _, ids in log["rounds"].values()}) == 2  # the founders', then the resumer's
    finally:
        fleet.kill_all()
        del master


def test_the_plans_outer_sync_model():
    # mccl plan's DiLoCo round: plain DiLoCo exposes its whole sync; streaming
    # hides each fragment's behind its overlap until it is longer than that;
    # the wires scale the bytes; a measured sync factor scales the time.
    from mccl import plan
    kw = dict(params=250_000_000, H=50, inner_s=1.0, n=8, beta_ns_per_byte=8 / 0.936)
    plain = plan.diloco_project(wire="bf16", fragments=1, **kw)
    assert plain["exposed_s"] == pytest.approx(plain["sync_s"]) and plain["overlap"] == 0
    assert plain["utilisation"] == pytest.approx(50 / (50 + plain["sync_s"]))
    streamed = plan.diloco_project(wire="bf16", fragments=5, **kw)
    assert streamed["overlap"] == 10 and streamed["exposed_s"] == 0 and streamed["utilisation"] == 1.0
    slow = plan.diloco_project(wire="bf16", fragments=5, sync_factor=20.0, **kw)
    assert slow["exposed_s"] == pytest.approx(5 * (slow["sync_s"] / 5 - 10.0))
    int8 = plan.diloco_project(wire="int8", fragments=1, **kw)
    assert int8["bytes_per_round"] == pytest.approx(plain["bytes_per_round"] * (1 + 4 / 256) / 2)
    assert int8["sync_s"] < 0.6 * plain["sync_s"]
    with_host = plan.diloco_project(wire="bf16", fragments=5, host_s=2.0, **kw)
    assert with_host["utilisation"] == pytest.approx(50 / 52)


@pytest.mark.slow
def test_the_speed_bench_runs_ddp_and_diloco_on_loopback(tmp_path):
    # mccl-bench diloco without a lab (2 members, a small emulated model):
    # every mode gives a utilisation, the DiLoCo modes their syncs' time on
    # the wire, the share hidden, the plan's model and a calibrated projection.
    import json
    import subprocess
    import sys
    out = tmp_path / "d.json"
    p = subprocess.run([sys.executable, "-m", "mccl.bench", "diloco", "--members", "2", "--params-m", "0.5",
                        "--compute-ms", "20", "--H", "6", "--fragments", "3", "--rounds", "3", "--ddp-steps", "3",
                        "--link-gbit", "1", "--project", "24", "--timeout", "120", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    rows = {r["mode"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"ddp", "diloco", "streaming"}
    for r in rows.values():
        assert 0 < r["utilisation"] <= 1.0 and 0 < r["predicted"]["utilisation"] <= 1.0, r
    assert rows["diloco"]["syncs"] == 1 and rows["diloco"]["overlap"] == 0
    assert rows["streaming"]["syncs"] == 3 and rows["streaming"]["overlap"] == 2
    assert 0.0 <= rows["streaming"]["hidden"] <= 1.0 and rows["streaming"]["sync_factor"] > 0
    assert "calibrated" in rows["streaming"]["projected"]["24"]
    assert "plan at N=24" in p.stdout
    # The window is round 2 whole (its end included), not round 1's end.
    assert rows["streaming"]["inner_steps"] == 6 and rows["streaming"]["start_skew_s"] >= 0.0
    assert rows["diloco"]["boundary_s"] is not None
    short = subprocess.run([sys.executable, "-m", "mccl.bench", "diloco", "--members", "2", "--rounds", "2",
                            "--link-gbit", "1"], capture_output=True, text=True, timeout=60)
    assert short.returncode != 0 and "--rounds 2" in short.stderr and "at least 3" in short.stderr, short.stderr


def test_the_host_bench_times_each_fragments_outer_step_at_a_given_size(tmp_path):
    # mccl-bench diloco-host: the product's hold, issue and apply for every
    # fragment, in a group of one, for a model in one tensor and in several.
    import json
    import subprocess
    import sys
    out = tmp_path / "h.json"
    p = subprocess.run([sys.executable, "-m", "mccl.bench", "diloco-host", "--params-m", "0.3", "--tensors", "1,7",
                        "--fragments", "3", "--rounds", "2", "--H", "6", "--overlap-s", "0.05", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["tensors"], r["fragments"], r["params"]) for r in rows] == [(1, 3, 300000), (7, 3, 300000)]
    for r in rows:
        assert len(r["rounds"]) == 2 and r["per_round_s"] > 0 and 0 < r["share_of_round"] < 1, r
        pf = r["per_fragment"]
        assert all(pf[k] > 0 for k in ("hold_s", "issue_s", "apply_s", "outer_thread_s")), r
        assert 0 <= pf["apply_wait_s"] <= pf["apply_s"] and r["outer_thread_per_round_s"] > 0, r
    assert "7 tensor(s): per fragment hold" in p.stdout and "outer thread per round" in p.stdout, p.stdout
