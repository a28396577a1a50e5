"""Members at their own speed, end to end on loopback (Job(shares="speed")):
members with emulated devices of different speeds (elastic_worker.py
--speed, --sample-ms) train one job; their shares move toward their speeds,
a joiner comes in, and the final parameters equal a one-process float64
replay of the step's global batches, on every member bit for bit. A member
that slows down is re-balanced, and under a StragglerPolicy asked to leave.
Plus Balancer in a plain DDP loop."""

from __future__ import annotations

import re
import statistics

import pytest

from conftest import needs_cpu_fsdp2, run_workers
from elastic_fleet import Fleet, _members, _store, ends_as_replayed

# Emulated devices: 25 ms per sample at speed 1, so that a busy 2-core
# machine's scheduling noise stays small beside a step.
SPEED = ["--shares", "speed", "--sleep-ms", "0", "--sample-ms", "25"]


def shares_of(fleet: Fleet, i: int) -> dict[int, tuple[list[int], int]]:
    """step -> (the shares worker i logged for it, its rank then)."""
    return {int(m.group(1)): ([int(x) for x in m.group(2).split(",")], int(m.group(3)))
            for m in re.finditer(r"SHARES (\d+) \[([\d, ]+)\] rank (\d+)", fleet.text(i))}


def mine(fleet: Fleet, i: int, step: int) -> int:
    """Worker i's share of `step`."""
    counts, rank = shares_of(fleet, i)[step]
    return counts[rank]


def same_parameters(fleet: Fleet, which: list[int]) -> None:
    hashes = {re.search(r"PARAMHASH (\w+)", fleet.text(i)).group(1) for i in which}
    assert len(hashes) == 1, f"members' parameters differ: {hashes}"


@pytest.mark.slow
def test_members_at_their_own_speed_match_a_weighted_replay(tmp_path):
    # Speeds 1, 2 and 4; a global batch of 24 (micro-batches of the
    # sampler's 4: 1, 2 and 4 of them per member once balanced); a member of
    # speed 2 joins. The epoch of 97 samples ends in a short step.
    master, port = _store()
    fleet = Fleet(f"127.0.0.1:{port}", tmp_path, extra=SPEED + ["--global-batch", "24"])
    try:
        for speed in (1, 2, 4):
            fleet.start(initial=3, extra=["--speed", str(speed)])
        fleet.wait_for("3 members balanced", lambda: fleet.latest_world() == 3 and max(fleet.commits()) >= 8)
        joiner = fleet.start(extra=["--speed", "2"])
        fleet.wait_for("the joiner admitted", lambda: fleet.latest_world() == 4)
        stop = max(fleet.commits()) + 8
        _members(port).request_end(stop)
        worlds = ends_as_replayed(fleet, tmp_path, [0, 1, 2, joiner], stop, weighted=True, global_batch=24)
        assert set(worlds.values()) == {3, 4}
        same_parameters(fleet, [0, 1, 2, joiner])
        logged = [shares_of(fleet, i) for i in range(4)]
        for s, (counts, _) in logged[0].items():
            assert all(b[s][0] == counts for b in logged if s in b), f"members disagree on step {s}'s shares"
        # The first step: nobody measured, the even split; later, by speed:
        # workers 0, 1, 2 have speeds 1, 2 and 4, the joiner (3) 2.
        assert logged[0][0][0] == [8, 8, 8]
        late = [s for s, (c, _) in logged[0].items() if worlds[s] == 3 and s >= 4 and sum(c) == 24]
        slow, mid, fast = (statistics.median(mine(fleet, i, s) for s in late) for i in range(3))
        assert slow < mid < fast and fast >= 2 * slow, logged[0]  # 4x, less each micro-batch's fixed cost
        four = [s for s, (c, _) in logged[0].items() if worlds[s] == 4 and sum(c) == 32][2:]
        assert statistics.median(mine(fleet, 0, s) for s in four) < \
            statistics.median(mine(fleet, joiner, s) for s in four), logged[0]
    finally:
        fleet.kill_all()
        del master


@pytest.mark.slow
def test_a_member_that_slows_is_rebalanced_then_leaves_as_a_straggler(tmp_path):
    # Three equal members; at step 6 one becomes 5x slower (its person
    # started a render). Its share falls within three boundaries; it stays
    # over the policy's 3x for 6 boundaries and leaves gracefully; the two
    # others train on, and the parameters equal the weighted replay.
    master, port = _store()
    fleet = Fleet(f"127.0.0.1:{port}", tmp_path, extra=SPEED + ["--straggler", "3,6"])
    try:
        for i in range(3):
            fleet.start(initial=3, extra=["--slow-at-step", "6", "--slow-factor", "5"] if i == 2 else [])
        fleet.wait_for("the straggler's leave", lambda: "LEFT" in fleet.text(2) and fleet.latest_world() == 2)
        stop = max(fleet.commits()) + 4
        _members(port).request_end(stop)
        worlds = ends_as_replayed(fleet, tmp_path, [0, 1], stop, weighted=True)
        assert worlds[6] == 3 and worlds[stop - 1] == 2, worlds
        fleet.assert_ok([2])
        same_parameters(fleet, [0, 1])
        log2 = fleet.text(2)
        assert re.search(r"leaves at the next step boundary as a straggler: \d+\.\dx the median member's time per "
                         r"sample for 6 steps", log2), log2[-3000:]
        even = [s for s, (c, _) in shares_of(fleet, 0).items() if s < 6 and sum(c) == 12]
        assert all(shares_of(fleet, 0)[s][0] == [4, 4, 4] for s in even), shares_of(fleet, 0)
        # Step 6 was its first slow one: its time reaches the others at step
        # 7's boundary, and step 8 is balanced (or the epoch's short step 8, then 9).
        s = next(s for s in (8, 9) if sum(shares_of(fleet, 0)[s][0]) == 12)
        assert mine(fleet, 2, s) * 3 <= min(mine(fleet, 0, s), mine(fleet, 1, s)), shares_of(fleet, 0)[s]
        assert re.search(r"CHANGE gen \d+ leave world 2", fleet.text(0)), fleet.text(0)[-3000:]
    finally:
        fleet.kill_all()
        del master


def _fsdp2_weighable() -> bool:
    from torch.distributed.fsdp import FSDPModule
    return hasattr(FSDPModule, "set_custom_reduce_scatter") and hasattr(FSDPModule, "set_all_reduce_hook")


@pytest.mark.slow
@needs_cpu_fsdp2
@pytest.mark.skipif(not _fsdp2_weighable(), reason="shares by speed with FSDP2 needs a torch with "
                    "FSDPModule.set_custom_reduce_scatter")
def test_fsdp_members_at_their_own_speed_match_a_weighted_replay(tmp_path):
    # FSDP2 (ShardedState): every member runs the same number of
    # micro-batches (each is a sequence of collectives), of its own size;
    # a joiner makes the members reshard (a new model object, whose
    # reduce-scatter must be weighed again).
    import elastic_worker as w
    master, port = _store()
    fleet = Fleet(f"127.0.0.1:{port}", tmp_path, extra=SPEED + ["--fsdp", str(tmp_path / "ckpt"),
                                                                "--checkpoint-every", "50"])
    try:
        for speed in (1, 3):
            fleet.start(initial=2, extra=["--speed", str(speed)])
        fleet.wait_for("2 members", lambda: fleet.latest_world() == 2 and max(fleet.commits()) >= 8)
        joiner = fleet.start(extra=["--speed", "1"])
        fleet.wait_for("the joiner admitted", lambda: fleet.latest_world() == 3)
        stop = max(fleet.commits()) + 4
        _members(port).request_end(stop)
        worlds = ends_as_replayed(fleet, tmp_path, [0, 1, joiner], stop, momentum=w.MOMENTUM, weighted=True)
        assert set(worlds.values()) == {2, 3}
        late = [s for s, (c, _) in shares_of(fleet, 0).items() if s >= 5 and sum(c) == 8]
        slow, fast = (statistics.median(mine(fleet, i, s) for s in late) for i in range(2))
        assert fast >= 2 * slow, shares_of(fleet, 0)  # 3x, less each micro-batch's fixed cost
    finally:
        fleet.kill_all()
        del master


@pytest.mark.slow
def test_balancer_in_a_plain_ddp_loop():
    # The helper without a Job: 3 ranks of speeds 1, 2, 4 (emulated); their
    # shares follow the speeds and the parameters equal the float64
    # replay of the global batches on every rank.
    outs = run_workers("balancer_ddp.py", 3)
    assert all("SHARES-FINAL" in o for o in outs)
