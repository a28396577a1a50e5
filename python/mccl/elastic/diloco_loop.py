"""Job.run's loop for a DiLoCoState: inner steps, outer syncs, and changes
of membership at rounds' ends only.

A round of H inner steps is a row of actions: at point j (j = 0..H) the
schedule's events (apply a fragment whose all-reduce was issued earlier:
wait for it, outer step, merge; issue a fragment: its pseudo-gradient,
an async all-reduce on the generation's wire group), then inner step j
(train_step on this member's samples, the inner optimizer's step: nothing
crosses the network). After point H, the round's end: one small all_reduce
of who asks to leave, how many joiners wait and whether the job was asked
to end (Job._boundary), then the change if any (transitions.py), then the
next round, of the members then in. So a leave or a join asked during a
round waits for its end, and a joiner receives the global state of a round's
end.

A failure (a member died: the next all-reduce fails, or the round's end's)
is recovered as Job.run recovers it: the survivors agree on the dead, shrink,
and the one whose outer updates are newest sends the job's state to those
that lag (a member that finished an all-reduce another did not). Survivors
keep their inner progress; then they agree where the round stands (the
furthest member's place), those behind train the inner steps they lack,
and the syncs in flight are issued again on the new group without the dead.
What the dead trained since its last sync is lost; its samples of the round
are owed to the next round (diloco_plan.RoundPlan). No outer update is lost.
"""

from __future__ import annotations

import logging
import time

import torch
import torch.distributed as dist

from .events import Excluded, JobStopped, _Regroup
from .transitions import _CheckpointException, deterministic

log = logging.getLogger("mccl.elastic")


def run(job, state, train_step, steps: int, on_step=None) -> str:
    if job.backend != "mccl" and state.wire_dtype != "fp32":
        raise ValueError(f"mccl.elastic.DiLoCoState: wire_dtype {state.wire_dtype!r} needs the mccl backend "
                         f"(this job's is {job.backend!r}); use wire_dtype='fp32'")
    if getattr(job, "_balance", None) is not None:
        raise ValueError("mccl.elastic.Job(shares='speed') splits DDP steps: a DiLoCoState's members each train "
                         "their own inner steps (use shares='equal')")
    if job.global_batch is not None:
        raise ValueError("mccl.elastic.Job(global_batch=...) is for State: a DiLoCoState's inner steps take "
                         "the sampler's batch on every member")
    return _Loop(job, state, train_step, on_step).run(steps)


class _Loop:
    def __init__(self, job, state, train_step, on_step):
        self.job, self.state, self.train_step, self.on_step = job, state, train_step, on_step
        self.group = None
        self.group_of = None  # the default group the wire group was made beside
        self.reconcile = False

    # ---- the generation's wire group ------------------------------------------------
    def wire(self):
        """The group the outer all-reduces run on: the default group on the
        fp32 wire, else a group of the same ranks whose float32 sums travel
        as state.wire_dtype (made again whenever the default group changes:
        torch's shrink_group and destroy_process_group end it with theirs)."""
        default = dist.distributed_c10d._get_default_group()
        if self.group_of is default:
            return self.group
        old, self.group = self.group, None
        if old is not None and old in dist.distributed_c10d._world.pg_map:
            dist.destroy_process_group(old)
        st = self.state
        if st.wire_dtype != "fp32":
            from ..hooks import wire_group
            self.group = wire_group(st.wire_dtype, min_bytes=0, reduce=st.wire_reduce)
        self.group_of = default
        backend = (self.group or default)._get_backend(torch.device("cpu"))
        probe = max(st.globals, key=lambda g: g.numel()).detach()  # what a fragment's sync sends (read, not sent)
        describe = getattr(backend, "_algorithm_for", None)
        st.outer_wire = describe("all_reduce", probe) if describe is not None else type(backend).__name__
        return self.group

    # ---- the loop --------------------------------------------------------------------
    def run(self, steps: int) -> str:
        from .job import _TrainStepError
        job, st = self.job, self.state
        job._sampler_batch = st.sampler.batch
        job.steps = steps
        job._know_state(st)
        if job.generation >= 0 and not job._formed:
            job._recover_until_formed(st, _Regroup(f"mccl.elastic: generation {job.generation} did not form"))
            self.reconcile = True
        while True:
            stop = None
            try:
                if job.generation < 0:
                    job.join(st)
                if job._newcomer:
                    job._first_state(st)
                group = self.wire()
                if self.reconcile:
                    self.catch_up(group)
                    self.reconcile = False
                if st.at >= st.END:
                    target = steps if job._end_at is None else min(steps, max(job._end_at, st.step))
                    if st.step >= target:
                        return job._finish(st)
                    st.start_round(tuple(job.record.members))
                while st.at < st.BOUNDARY:
                    a = st.at
                    if a % 2 == 0:
                        self.events(a // 2, group)
                    else:
                        self.inner(a // 2)
                    st.at += 1
                if self.boundary() == "left":
                    return "left"
                continue
            except _TrainStepError as e:
                if job._leaving_after(e):
                    return "left"
                log.error("mccl.elastic: train_step raised on this member at inner step %d (samples %s): %r",
                          job._step_of_error, e.samples, e.error)
                stop, failure = job._stop_error("train_step", e.error, e.samples), e.error
            except (dist.DistBackendError, RuntimeError, ValueError, _CheckpointException) as e:
                if isinstance(e, JobStopped) or not (job._is_comm_failure(e) or deterministic(e)):
                    raise
                if deterministic(e):
                    stop = job._stop_error("mismatch", e)
                failure = e
            st.optimizer.zero_grad(set_to_none=True)
            st.lost()
            # A leaver left out of the next generation raises _Left, a job that
            # ended meanwhile _Done: Job.run returns "left" or "done".
            if stop is not None:
                job._recover(st, failure, stop=stop)  # stops the job: raises JobStopped
            else:
                job._recover_until_formed(st, failure)
            self.reconcile = True

    def events(self, j: int, group, catching_up: bool = False) -> None:
        st = self.state
        for kind, f in st.schedule.events(j):
            if kind == "issue":
                if st.done_round[f] == st.round_index:
                    continue
                if f not in st.pending:
                    st.hold(f)
                if not catching_up and st.pending[f].work is None:
                    st.issue(f, group)
                continue
            if st.done_round[f] == st.round_index:
                continue  # applied already (this member, or the one whose state it took)
            if catching_up:
                raise RuntimeError(f"mccl.elastic: DiLoCo recovery: fragment {f}'s outer step at point {j} of "
                                   f"round {st.round_index} was applied by no member, yet a member is past it")
            if st.pending[f].work is None:
                st.issue(f, group)
            alive = list(self.job.record.members)
            st.apply(f, j)["alive"] = alive  # whose pseudo-gradients the sum could hold
            if st.schedule.applies[f] == st.H:
                st.commit_round(alive)

    def inner(self, k: int) -> None:
        from .job import _scalar
        job, st = self.job, self.state
        t0 = time.perf_counter()
        idx = st.slot(k, job.id)
        job._step_of_error = st.round_start + k
        loss = None
        if idx is not None:
            loss = job._train(st.model, idx, 1, self.train_step)
            st.optimizer.step()
            st.optimizer.zero_grad(set_to_none=True)
            st.trained()
        st.inner_clock = job.step = st.round_start + k + 1
        job._step_times.append((time.perf_counter() - t0, len(idx or ())))
        job._last_loss = _scalar(loss)
        if self.on_step is not None:
            self.on_step(job, st, loss)

    def boundary(self) -> str:
        """The round's end: the small all_reduce of leaves, joins and the end,
        a periodic checkpoint (rank 0), then the change."""
        job, st = self.job, self.state
        tb = time.perf_counter()
        leavers, joiners, end_at = job._boundary(st.step)()
        job.boundary_s.append(time.perf_counter() - tb)
        if end_at is not None:
            # step + 1 is Job._boundary's "at once" (the end asked for is this
            # step or one before): for a round, its end, now.
            job._end_at = st.step if end_at <= st.step + 1 else end_at
        if job._durable.enabled:
            job._durable.periodic(st, job._meta)
        if job._end_at is not None and st.step >= min(job.steps, job._end_at):
            joiners = 0  # the job ends here: nobody is admitted at its last boundary
        if leavers or joiners:
            if job._change(st, leavers, joiners) == "left":
                return "left"
        if getattr(job, "_fenced", False):
            raise Excluded(f"mccl.elastic: {job.id}: the store holds a generation after {job.generation} that "
                           "does not list this member: the job went on without it")
        st.at = st.END
        return ""

    # ---- after a recovery ----------------------------------------------------------------
    def catch_up(self, group) -> None:
        """The survivors (and anyone admitted in the recovery) agree where the
        round stands: the furthest member's place. Those behind train the
        inner steps they lack (and take their pseudo-gradients where a
        fragment is issued); then the syncs every member holds go on the wire
        again, in the order they were issued."""
        job, st = self.job, self.state
        mine = (st.round_index, st.at, st.step, tuple(st.round_members), st.round_start, st.local_live)
        everyone: list = [None] * job.world
        dist.all_gather_object(everyone, mine)
        steps = {e[2] for e in everyone}
        if len(steps) > 1:
            raise RuntimeError(f"mccl.elastic: DiLoCo recovery: the members' outer updates differ after the state "
                               f"sync (steps {sorted(steps)})")
        # Where the round stands is where the furthest member that trains in
        # it is: a member that took the whole state in this recovery (a joiner
        # whose first state had not arrived) has no place in it yet.
        live = [e for e in everyone if e[5]]
        ref = max(live or everyone, key=lambda e: (e[0], e[1]))
        if live and not st.local_live:
            # Into the members' round, from its start (training its own
            # samples if the round lists it; else nothing until the next).
            st.start_round(ref[3], ref[0], ref[4])
            if ref[1] >= st.BOUNDARY:
                st.at = ref[1]
        elif ref[0] > st.round_index:
            if st.at < st.BOUNDARY:
                raise RuntimeError(f"mccl.elastic: DiLoCo recovery: a member is in round {ref[0]} while this one "
                                   f"is at action {st.at} of round {st.round_index}")
            st.start_round(ref[3], ref[0], ref[4])
        if ref[1] >= st.BOUNDARY:
            # At (or past) the round's end: actions up to it are done by all.
            self._train_to(min(ref[1], st.BOUNDARY))
            st.at = max(st.at, ref[1])
        else:
            self._train_to(ref[1])
        held: list = [None] * job.world
        dist.all_gather_object(held, sorted(f for f, p in st.pending.items()))
        common = set(held[0]).intersection(*held[1:])
        issues = st.schedule.issues
        for f in sorted(common, key=lambda f: issues[f]):
            st.issue(f, group)
        log.warning("mccl.elastic: DiLoCo round %d goes on at action %d of %d after the recovery%s",
                    st.round_index, st.at, st.BOUNDARY, f"; syncs {sorted(common)} issued again" if common else "")

    def _train_to(self, target: int) -> None:
        st = self.state
        while st.at < target:
            a = st.at
            if a % 2 == 0:
                self.events(a // 2, None, catching_up=True)
            else:
                self.inner(a // 2)
            st.at += 1
