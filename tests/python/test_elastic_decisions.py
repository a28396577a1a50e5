"""The elastic protocol's decisions and records, without processes or a store
(decisions.py, records.py): who is in, who is dead, who may found or resume."""

from __future__ import annotations

import pytest

from mccl.elastic import decisions
from mccl.elastic.decisions import Accounting, Outlook, Verdict
from mccl.elastic.records import Cause, Generation, JoinRequest, RecordError


def why(sig, job_sig):
    return f"{sig} vs {job_sig}"


def gen(members, cause="join", step=10, admitted=4, sig="S", **kw):
    return Generation(members=tuple(members), admitted=admitted, cause=Cause(cause), step=step,
                      incarnation="inc1", signature=sig, **kw)


# ---- records ------------------------------------------------------------------------
def test_a_generation_round_trips_and_is_parsed_strictly():
    g = gen(["a", "b"], refused={"c": "float32"}, checkpoint="step-1", error={"kind": "x"})
    assert Generation.from_json(g.to_json()) == g
    assert Generation.from_json(g.to_json().encode()) == g
    assert g.live and not gen([], "dormant").live and not gen([], "end").live and not gen([], "stopped").live
    for bad, msg in [("not json", "not JSON"), ("[1]", "not a JSON object"),
                     ('{"members": "a", "admitted": 1, "cause": "join"}', "list of member ids"),
                     ('{"members": ["a"], "admitted": "1", "cause": "join"}', "must be an integer"),
                     ('{"members": ["a"], "admitted": 1, "cause": "exploded"}', "unknown cause"),
                     ('{"members": ["a"], "cause": "join"}', "has no 'admitted'"),
                     ('{"members": [""], "admitted": 1, "cause": "join"}', "list of member ids"),
                     ('{"members": ["a"], "admitted": true, "cause": "join"}', "must be an integer")]:
        with pytest.raises(RecordError, match=msg):
            Generation.from_json(bad, "g/7")


def test_a_join_request_round_trips_and_needs_an_id():
    r = JoinRequest("m1", "host", 12, "10.0.0.1:4000", "S", True)
    assert JoinRequest.from_json(r.to_json()) == r
    with pytest.raises(RecordError, match="no member id"):
        JoinRequest.from_json('{"host": "x"}')


# ---- who is in ------------------------------------------------------------------------
def test_founders_follow_the_majority_model_and_refuse_the_rest():
    reqs = [JoinRequest("odd", signature="B"), JoinRequest("x", signature="A"), JoinRequest("y", signature="A"),
            JoinRequest("z", signature="A")]
    members, refused, sig = decisions.founders(reqs, why)
    # A founder that registered first with another model does not impose it.
    assert members == ["x", "y", "z"] and sig == "A"
    assert list(refused) == ["odd"] and "B vs A" in refused["odd"]


def test_founders_tie_goes_to_the_earliest_and_unknown_signatures_pass():
    reqs = [JoinRequest("a", signature="B"), JoinRequest("b", signature="A"), JoinRequest("c", signature="")]
    members, refused, sig = decisions.founders(reqs, why)
    assert sig == "B" and members == ["a", "c"] and list(refused) == ["b"]
    assert decisions.founders([JoinRequest("a"), JoinRequest("b")], why) == (["a", "b"], {}, "")


def test_at_a_boundary_leavers_go_matching_joiners_come_and_others_are_refused():
    rec = gen(["a", "b", "c"])
    nxt = decisions.at_boundary(rec, [1], [JoinRequest("d", signature="S"), JoinRequest("e", signature="T")],
                                admitted=6, step=11, why=why)
    assert nxt.members == ("a", "c", "d") and nxt.cause is Cause.JOIN and nxt.admitted == 6 and nxt.step == 11
    assert list(nxt.refused) == ["e"] and nxt.incarnation == "inc1" and nxt.signature == "S"
    # Only refused joiners: the same members, the request handled.
    only_bad = decisions.at_boundary(rec, [], [JoinRequest("e", signature="T")], 5, 11, why)
    assert only_bad.cause is Cause.PASS and only_bad.members == rec.members and "e" in only_bad.refused
    assert decisions.at_boundary(rec, [0], [], 4, 11, why).cause is Cause.LEAVE
    assert decisions.at_boundary(rec, [], [], 5, 11, why).cause is Cause.PASS


def test_everyone_leaving_makes_the_job_dormant_only_with_a_checkpoint():
    rec = gen(["a", "b"])
    d = decisions.after_leaving_all(rec, 56, "step-000000056-abcd0123")
    assert d.cause is Cause.DORMANT and d.members == () and d.step == 56 and d.checkpoint.startswith("step-")
    assert decisions.after_leaving_all(rec, 56, "").cause is Cause.END


# ---- failures --------------------------------------------------------------------------
def acct(**kw):
    base = dict(world=4, alive=frozenset({0, 1}), seen_dead=frozenset(), presumed=frozenset(), elapsed_s=0.0,
                grace_s=1.0)
    base.update(kw)
    return Accounting(**base)


def test_the_dead_are_decided_once_every_rank_is_accounted_for_or_the_grace_is_over():
    assert decisions.dead_set(acct()) is None  # ranks 2 and 3 unaccounted for
    assert decisions.dead_set(acct(seen_dead=frozenset({2, 3}))) == [2, 3]  # a beacon or a connection proved it
    assert decisions.dead_set(acct(seen_dead=frozenset({2}), elapsed_s=0.5)) is None
    assert decisions.dead_set(acct(seen_dead=frozenset({2}), elapsed_s=1.0)) == [2, 3]  # the grace is over
    # A rank seen dead that checked in after all is alive.
    assert decisions.dead_set(acct(alive=frozenset({0, 1, 2, 3}), seen_dead=frozenset({2}))) == []
    # Presumed dead (dead in the generation before) once presumed_s passed.
    a = acct(alive=frozenset({0, 1, 2}), presumed=frozenset({3}), presumed_s=0.3)
    assert decisions.dead_set(a) is None and decisions.dead_set(acct(**{**a.__dict__, "elapsed_s": 0.3})) == [3]


def test_a_rank_proven_alive_is_waited_for_past_the_grace():
    # Rank 3 has not checked in but its beacon answers (it is inside a long
    # step): it is not taken for dead after the crash grace, only after the
    # longer alive grace.
    a = acct(seen_dead=frozenset({2}), elapsed_s=1.5, beacon_alive=frozenset({3}), alive_grace_s=60.0)
    assert decisions.dead_set(a) is None
    assert decisions.dead_set(acct(**{**a.__dict__, "alive": frozenset({0, 1, 3})})) == [2]
    assert decisions.dead_set(acct(**{**a.__dict__, "elapsed_s": 60.0})) == [2, 3]


def test_newcomers_alone_wait_for_a_holder_of_the_state():
    a = acct(alive=frozenset({2}), elapsed_s=5.0, holders=False, holder_s=20.0)
    assert decisions.dead_set(a) is None
    assert decisions.dead_set(acct(**{**a.__dict__, "elapsed_s": 20.0})) == [0, 1, 3]


def test_after_a_failure_the_survivors_go_on_at_the_newest_step():
    rec = gen(["a", "b", "c"], step=40)
    nxt = decisions.after_failure(rec, [1], {0: 41, 2: 40})
    assert nxt.members == ("a", "c") and nxt.cause is Cause.CRASH and nxt.step == 41
    assert decisions.after_failure(rec, [], {0: 40, 1: 40, 2: 40}).cause is Cause.REGROUP
    assert decisions.after_failure(rec, [], {0: -1, 1: -1, 2: -1}).step == 0


def test_a_failure_that_keeps_coming_back_is_looping():
    members = ("a", "b")
    again = Generation(members=members, admitted=2, cause=Cause.REGROUP, step=7)
    history = [gen(members, "join", 7), again]
    assert not decisions.looping(history, again, 3)  # the second regroup in a row
    assert decisions.looping(history + [again], again, 3)  # the third
    # Progress in between, or other members, is not a loop.
    assert not decisions.looping([again, gen(members, "join", 8), again], again, 3)
    other = Generation(members=("a",), admitted=2, cause=Cause.CRASH, step=7)
    assert not decisions.looping([again, again], other, 3)
    assert not decisions.looping([again, again], gen(members, "join", 7), 3)


def test_a_stop_names_the_error_and_the_survivors():
    s = decisions.stopped(gen(["a", "b"]), 12, {"kind": "train_step", "member": "b", "samples": [16],
                                                "error": "ValueError: bad"}, "step-12", ["a", "b"])
    assert s.cause is Cause.STOPPED and s.members == () and s.checkpoint == "step-12"
    assert s.error["survivors"] == ["a", "b"]
    text = decisions.describe_error(s.error)
    assert "train_step on member b" in text and "samples [16]" in text and "ValueError: bad" in text


# ---- a process that wants in ------------------------------------------------------------
def look(**kw):
    base = dict(latest=None, created=False, may_create=False, checkpoint=False, store_age_s=100.0, reseed_s=5.0,
                silent_s=0.0, dead_after_s=60.0)
    base.update(kw)
    return Outlook(**base)


@pytest.mark.parametrize("outlook,expected", [
    # An empty store younger than the re-seed window: living members may yet write the job back.
    (look(store_age_s=1.0, may_create=True), Verdict.WAIT),
    (look(store_age_s=1.0, checkpoint=True), Verdict.WAIT),
    # Young by its own clock (under a minute): this process must also have seen it empty for the
    # window on its own clock (a skewed store clock cannot shorten the fence)...
    (look(store_age_s=30.0, empty_for_s=1.0, may_create=True), Verdict.WAIT),
    (look(store_age_s=30.0, empty_for_s=5.0, may_create=True), Verdict.FOUND),
    # ...which a store up for long does not need.
    (look(store_age_s=3600.0, empty_for_s=0.0, may_create=True), Verdict.FOUND),
    # A store that lost the job's end or stop: the checkpoint folder still tells.
    (look(checkpoint=True, checkpoint_kind="final"), Verdict.FINISHED),
    (look(checkpoint=True, checkpoint_kind="stopped"), Verdict.STOPPED),
    (look(checkpoint=True, checkpoint_kind="dormant"), Verdict.RESUME),
    # Then: the job's checkpoint makes it resumable (never founded afresh), even for a creator.
    (look(checkpoint=True, may_create=True), Verdict.RESUME),
    (look(created=True), Verdict.FOUND),
    (look(may_create=True), Verdict.FOUND),
    (look(), Verdict.MISSING),  # a mistyped job id founds nothing
    (look(latest=gen([], "end")), Verdict.FINISHED),
    (look(latest=gen([], "stopped", error={"kind": "x"})), Verdict.STOPPED),
    (look(latest=gen([], "dormant", checkpoint="c")), Verdict.RESUME),
    (look(latest=gen(["a"]), silent_s=10.0), Verdict.JOIN),
    (look(latest=gen(["a"]), silent_s=60.0, checkpoint=True), Verdict.RESUME),  # the whole fleet died
    (look(latest=gen(["a"]), silent_s=60.0), Verdict.LOST),
    # A running job is joined whatever the store's age or the process's permission.
    (look(latest=gen(["a"]), store_age_s=0.0, may_create=True), Verdict.JOIN),
])
def test_verdict(outlook, expected):
    v, why_text = decisions.verdict(outlook)
    assert v is expected, why_text
    assert why_text


def test_the_missing_verdict_says_how_to_create_the_job():
    _, text = decisions.verdict(look())
    assert "mccl elastic create" in text and "create=True" in text and "mistyped" in text
