"""The protocol's decisions, as pure functions of what the store and the
clocks say: who is in the next generation, who is taken for dead, whether
a process may found or resume the job, when a recovery must stop looping.

Nothing here touches a store, a socket or a clock: job.py gathers the
inputs, calls these, and acts. tests/python/test_elastic_decisions.py
checks them case by case without processes (the way torchft tests its
quorum computation).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from .records import Cause, Generation, JoinRequest

# why(joiner's signature, the job's signature) -> the first difference, for a refusal
Why = Callable[[str, str], str]


def compatible(sig: str, job_sig: str) -> bool:
    """An empty signature could not be computed: it is not held against anyone."""
    return not sig or not job_sig or sig == job_sig


def refusal(sig: str, job_sig: str, why: Why) -> str:
    return f"its model or optimizer differs from the job's ({why(sig, job_sig)})"


# ---- who is in ---------------------------------------------------------------
def founders(requests: list[JoinRequest], why: Why) -> tuple[list[str], dict[str, str], str]:
    """The first generation's members from the live requests (in request
    order): those whose model matches the majority's (a tie goes to the
    earliest request's), the others refused. Returns (members, refused, the
    job's signature)."""
    known = [r.signature for r in requests if r.signature]
    if not known:
        return [r.id for r in requests], {}, ""
    counts = Counter(known)
    best = max(counts.values())
    job_sig = next(s for s in known if counts[s] == best)  # earliest of the most common
    members = [r.id for r in requests if compatible(r.signature, job_sig)]
    refused = {r.id: refusal(r.signature, job_sig, why) for r in requests if not compatible(r.signature, job_sig)}
    return members, refused, job_sig


def resumers(requests: list[JoinRequest], job_sig: str, why: Why) -> tuple[list[str], dict[str, str]]:
    """The members that take up a dormant job: the live requests whose model
    matches the checkpoint's; the others are refused."""
    ok = [r.id for r in requests if compatible(r.signature, job_sig)]
    bad = {r.id: refusal(r.signature, job_sig, why) for r in requests if not compatible(r.signature, job_sig)}
    return ok, bad


def at_boundary(rec: Generation, leavers: list[int], joiners: list[JoinRequest], admitted: int, step: int,
                why: Why) -> Generation:
    """The generation after a step boundary with `leavers` (ranks) going and
    `joiners` (live requests up to `admitted`) asking to come in. Joiners whose
    model differs are refused (named in the record, so they hear why)."""
    stay = [m for r, m in enumerate(rec.members) if r not in set(leavers)]
    fresh = [j.id for j in joiners if compatible(j.signature, rec.signature) and j.id not in stay]
    refused = {j.id: refusal(j.signature, rec.signature, why)
               for j in joiners if not compatible(j.signature, rec.signature)}
    cause = Cause.JOIN if fresh else Cause.LEAVE if leavers else Cause.PASS
    return Generation(members=tuple(stay + fresh), admitted=admitted, cause=cause, step=step,
                      incarnation=rec.incarnation, signature=rec.signature, refused=refused)


def after_leaving_all(rec: Generation, step: int, checkpoint: str) -> Generation:
    """Every member left at one boundary: dormant with the state in
    `checkpoint`, or, with nowhere to keep the state, the end of the job."""
    return Generation(members=(), admitted=rec.admitted, cause=Cause.DORMANT if checkpoint else Cause.END,
                      step=step, incarnation=rec.incarnation, signature=rec.signature, checkpoint=checkpoint)


# ---- failures ----------------------------------------------------------------------
@dataclass(frozen=True)
class Accounting:
    """What a survivor of generation n's failure knows while it waits for the others."""
    world: int
    alive: frozenset        # ranks that checked in
    seen_dead: frozenset    # ranks a survivor saw fail (a connection, a beacon)
    presumed: frozenset     # ranks dead in the generation before (recovering a record written before the failure)
    elapsed_s: float        # since this survivor began to wait
    grace_s: float          # how long to wait for ranks nobody saw die
    presumed_s: float | None = None  # presumed ranks count as dead after this long
    holders: bool = True    # a rank that holds the job's state has checked in (or the job has none yet)
    holder_s: float = 0.0   # how long to wait for one, past the grace
    beacon_alive: frozenset = frozenset()  # ranks not checked in whose process is proven there (its beacon)
    alive_grace_s: float = 0.0  # how long to wait for those (a member busy in a long step sees the failure late)


def dead_set(a: Accounting) -> list[int] | None:
    """The dead of a failure once it can be decided (None: wait on). Every
    rank is accounted for (checked in, or seen dead), or the grace is over;
    a rank whose process is proven alive (its beacon answers) is waited for
    up to `alive_grace_s` (it may be inside a long step and hear of the
    failure only at its next collective); and, while the job has state, a
    rank that holds it has checked in (or `holder_s` is over: joiners alone
    must not decide that every member is dead)."""
    dead = a.seen_dead - a.alive
    if a.presumed_s is not None and a.elapsed_s >= a.presumed_s:
        dead |= a.presumed - a.alive
    if len(a.alive) + len(dead) < a.world and a.elapsed_s < a.grace_s:
        return None
    if (a.beacon_alive - a.alive - dead) and a.elapsed_s < a.alive_grace_s:
        return None
    if not a.holders and a.elapsed_s < a.holder_s:
        return None
    return sorted(set(range(a.world)) - a.alive)


def after_failure(rec: Generation, dead: list[int], steps: dict[int, int]) -> Generation:
    """Generation n + 1 after generation n failed: its survivors, at the
    newest step a survivor committed."""
    stay = [m for r, m in enumerate(rec.members) if r not in set(dead)]
    top = max(steps.values()) if steps else 0
    return Generation(members=tuple(stay), admitted=rec.admitted, cause=Cause.CRASH if dead else Cause.REGROUP,
                      step=max(top, 0), incarnation=rec.incarnation, signature=rec.signature)


def looping(history: list[Generation], nxt: Generation, limit: int) -> bool:
    """Whether `nxt` would be the `limit`-th failure record in a row at the same
    step with the same members: the failure is not going away by itself."""
    if nxt.cause not in (Cause.REGROUP, Cause.CRASH):
        return False
    same = 1
    for g in reversed(history):
        if g.cause in (Cause.REGROUP, Cause.CRASH) and g.step == nxt.step and g.members == nxt.members:
            same += 1
        else:
            break
    return same >= limit


def stopped(rec: Generation, step: int, error: dict, checkpoint: str, survivors: list[str]) -> Generation:
    """The job stops on an error every member must hear about (train_step
    raised, the ranks disagree, a failure that keeps coming back)."""
    return Generation(members=(), admitted=rec.admitted, cause=Cause.STOPPED, step=step,
                      incarnation=rec.incarnation, signature=rec.signature, checkpoint=checkpoint,
                      error=dict(error, survivors=list(survivors)))


# ---- a process that wants in -------------------------------------------------------
class Verdict(Enum):
    JOIN = "join"            # the job runs: ask to be admitted
    WAIT = "wait"            # not yet decidable (a young store may be re-seeded by living members)
    FOUND = "found"          # no job and none on disk: start it from step 0
    RESUME = "resume"        # take the job up from its checkpoint
    FINISHED = "finished"    # the job is over: stop at once
    STOPPED = "stopped"      # an error stopped it: stop at once, naming the error
    MISSING = "missing"      # no such job, and this process may not found it
    LOST = "lost"            # every member is gone and nothing on disk holds the state


# A store whose own clock says it has held keys this long did not just
# restart: an empty one is a new store (whatever a few seconds of clock skew
# between its machine and this one make of it).
TRUSTED_AGE_S = 60.0


@dataclass(frozen=True)
class Outlook:
    """What a process that wants in sees (job.py gathers it)."""
    latest: Generation | None     # the newest generation in the store
    created: bool                 # `mccl elastic create` (or a founder told to) marked the job
    may_create: bool              # this process was told it may found the job
    checkpoint: bool              # the job's checkpoint folder holds a checkpoint
    store_age_s: float            # how long the store has held keys (its epoch against this machine's clock)
    reseed_s: float               # how long a young store is given for living members to re-seed it
    silent_s: float               # how long the job's heartbeat has not moved
    dead_after_s: float           # silence after which a live generation's members are taken for gone
    empty_for_s: float = 0.0      # how long this process has seen the store without a record of the job
    checkpoint_kind: str = ""     # the newest checkpoint's kind ("final", "stopped", "dormant", "periodic")


def verdict(o: Outlook) -> tuple[Verdict, str]:
    """Whether this process may join, found or resume the job, with why.

    Founding is fenced: a store that came back empty after a restart while
    the job ran would let a joiner start a second job under the same name;
    so a process never founds or resumes from an empty store that is young
    (by its own epoch, younger than TRUSTED_AGE_S) before it has itself seen
    it empty for `reseed_s` on its own clock (the members re-seed it within
    about a second of its return), never founds a job that has a checkpoint
    (it resumes it, or hears that it finished or stopped), and founds only
    when told to."""
    g = o.latest
    if g is None:
        if o.store_age_s < o.reseed_s or (o.store_age_s < TRUSTED_AGE_S and o.empty_for_s < o.reseed_s):
            return Verdict.WAIT, ("the store holds no record of the job and came up moments ago: waiting "
                                  f"{o.reseed_s:g} s for living members to re-seed it")
        if o.checkpoint and o.checkpoint_kind == "final":
            return Verdict.FINISHED, "the job finished (its checkpoint folder says so; the store has no record of it)"
        if o.checkpoint and o.checkpoint_kind == "stopped":
            return Verdict.STOPPED, ("an error stopped the job (its checkpoint folder says so; the store has no "
                                     "record of it: `mccl elastic resume --checkpoint-dir DIR` takes it up)")
        if o.checkpoint:
            return Verdict.RESUME, "the store holds no record of the job; its checkpoint folder does"
        if o.created or o.may_create:
            return Verdict.FOUND, "a new job"
        return Verdict.MISSING, ("the store holds no record of the job and its checkpoint folder none either; "
                                 "create it with `mccl elastic create` or start its first member with "
                                 "create=True (a mistyped job id looks like this)")
    if g.cause is Cause.END:
        return Verdict.FINISHED, f"the job finished at step {g.step}"
    if g.cause is Cause.STOPPED:
        return Verdict.STOPPED, f"the job stopped at step {g.step}: {describe_error(g.error)}"
    if g.cause is Cause.DORMANT:
        return Verdict.RESUME, f"the job is dormant at step {g.step}"
    if o.silent_s >= o.dead_after_s:
        if o.checkpoint:
            return Verdict.RESUME, (f"no member of the job ({len(g.members)} in its last generation) was seen "
                                    f"alive for {o.silent_s:.0f} s: resuming from the checkpoint")
        return Verdict.LOST, (f"no member was seen alive for {o.silent_s:.0f} s and the job has no checkpoint "
                              "(Job(checkpoint_dir=...) keeps one)")
    return Verdict.JOIN, "the job runs"


def describe_error(error: dict) -> str:
    if not error:
        return "no error recorded"
    who = error.get("member", "?")
    parts = [f"{error.get('kind', 'error')} on member {who}"]
    if error.get("samples") is not None:
        parts.append(f"samples {error['samples']}")
    parts.append(str(error.get("error", "")))
    return ", ".join(p for p in parts if p)
