"""How the members go from one generation to the next: a step boundary's
change (leavers go, joiners come, or everyone leaves and the job goes
dormant), a failure's recovery (the survivors agree on the dead and go on),
and a stop (an error every member must hear about). job.py runs the loop;
decisions.py computes what the records say.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from . import decisions
from .beacon import Watches
from .events import Change, Excluded, JobStopped, _Done, _Left, _Regroup
from .records import Cause, Generation
from .store import StoreAway

log = logging.getLogger("mccl.elastic")

try:
    from torch.distributed.checkpoint.api import CheckpointException as _CheckpointException
except ImportError:  # pragma: no cover - every torch we support has it
    class _CheckpointException(Exception):
        pass

# How many failure records in a row, at one step with the same members, before the job stops.
REGROUP_LIMIT = 3
# How long a leaver waits for the store, or for the others at its last barrier.
LEAVER_PATIENCE_S = 2.0


def deterministic(e: BaseException) -> bool:
    """An error that happens again if the step is redone: the ranks disagree
    on a collective (MCCL raises ValueError on the rank that saw it; the
    others hear its text through the group's abort)."""
    return "ranks disagree" in str(e)


class Transitions:
    """Job's part that changes generations (a mixin: job.py)."""

    # ---- forming a generation's group --------------------------------------
    def _init_group(self, n: int, rec: Generation, after: int | None = None) -> None:
        """This process's group of generation n. The generation is this
        process's from here on, formed or not: a group that fails to form
        (a member died before its rendezvous) is recovered like one that
        failed later, among the members its record lists. `after`: the
        generation whose step boundary led here (a join), which members
        that failed at that boundary are recovering instead."""
        rank = rec.members.index(self.id)
        self._move_to(n, rec)
        self._formed = False
        # A failed init_process_group leaves torch's group counter raised,
        # which would name this process's next group differently from the
        # others' (another store prefix: they would never meet). With no
        # group left, nothing else uses it; pg/<n>/ keeps every attempt apart.
        world_state = getattr(dist.distributed_c10d, "_world", None)
        if not dist.is_initialized() and hasattr(world_state, "group_count"):
            world_state.group_count = 0
        self._meet_rank0(n, rank, len(rec.members), after)
        store = dist.PrefixStore(self.members.key(f"pg/{n}/"), self.members.store.raw())
        dist.init_process_group(self.backend, store=store, rank=rank, world_size=len(rec.members),
                                timeout=self.timeout)
        self._formed = True
        # Every member's address, now: the group may need a connection it has
        # not made yet while the store is away (or back, empty).
        learn = getattr(self._backend(), "_learn_addresses", None)
        if learn is not None:
            learn()

    def _watches(self) -> Watches:
        return Watches(self.members.beacon_of)

    def _meet_rank0(self, n: int, rank: int, world: int, after: int | None) -> None:
        """Generation n's members meet before its rendezvous. Each other
        member says it is here (pg/<n>/here/<rank>) and waits for rank 0 to
        open the group (pg/<n>/open), or for a member that checked in to
        recover generation n (its rank 0 found it cannot form, e.g. a member
        it lists died first): then it recovers it too, at once. Rank 0 opens
        once every member is here; it recovers instead when a member checks
        in to recover generation n, or generation `after`: members for which
        the boundary that wrote n failed (rank 0 had passed its barrier), who
        will not come. Whoever waits for a process watches its beacon: a
        process proven dead (its beacon refused or closed) is noted dead for
        generation n's recovery at once, instead of waited for until the
        timeout."""
        m = self.members
        members = self.record.members
        watches = self._watches()
        try:
            if rank == 0:
                watch = [f"rec/{n}/alive"] + ([f"rec/{after}/alive"] if after is not None else [])
                here = [f"pg/{n}/here/{r}" for r in range(1, world)]
                end = time.monotonic() + self.timeout.total_seconds()
                while here and not m.has_all(here):
                    for key in watch:
                        if m.has(key):
                            raise _Regroup(f"mccl.elastic: members are recovering generation {key.split('/')[1]} "
                                           f"while generation {n} forms")
                    missing = [r for r in range(1, world) if not m.has(f"pg/{n}/here/{r}")]
                    dead = [r for r in missing if watches.dead(members[r])]
                    if dead:
                        m.note_dead(n, dead)
                        raise _Regroup(f"mccl.elastic: generation {n}'s rank(s) {dead} died before its rendezvous")
                    if time.monotonic() >= end:
                        # Alive or not (a frozen process's beacon still
                        # answers), they missed it: counted dead at once, so
                        # the recovery does not wait for them again. One
                        # that checks in after all is not (dead_set).
                        m.note_dead(n, missing)
                        raise _Regroup(f"mccl.elastic: generation {n}'s ranks {missing} did not come to its "
                                       f"rendezvous within {self.timeout.total_seconds():g} s")
                    time.sleep(0.005)
                m.set(f"pg/{n}/open", "1")
                return
            m.set(f"pg/{n}/here/{rank}", "1")
            end = time.monotonic() + self.timeout.total_seconds()
            while not m.has(f"pg/{n}/open"):
                if m.has(f"rec/{n}/alive"):
                    raise _Regroup(f"mccl.elastic: generation {n} is being recovered before its group formed")
                if watches.dead(members[0]):
                    m.note_dead(n, [0])
                    raise _Regroup(f"mccl.elastic: generation {n}'s rank 0 died before its rendezvous")
                if time.monotonic() >= end:
                    # Rank 0 never opened. Members that did not check in
                    # (alive or not: a frozen joiner's beacon answers) are
                    # counted dead now, as rank 0 counts them at its own
                    # timeout, which may come after this one: the recovery
                    # must not wait for them a second time. If every member
                    # checked in, rank 0 is what is missing: the rendezvous
                    # below times out in turn, naming it.
                    missing = [r for r in range(1, world) if r != rank and not m.has(f"pg/{n}/here/{r}")]
                    if missing:
                        m.note_dead(n, missing)
                        raise _Regroup(f"mccl.elastic: generation {n}'s ranks {missing} did not come to its "
                                       f"rendezvous within {self.timeout.total_seconds():g} s")
                    break
                time.sleep(0.01)
        finally:
            watches.close()

    def _publish(self, n: int, rec: Generation) -> Generation:
        """Generation n's record: `rec`, or the one another member wrote first."""
        held = self.members.publish(n, rec)
        if held != rec:
            log.warning("mccl.elastic: generation %d was published by another member", n)
        return held

    # ---- a step boundary's change ------------------------------------------------
    def _change(self, state, leavers: list[int], joiners: int) -> str:
        self._durable.fence()  # a change may send or replace the state a background save still copies
        if self.rank not in leavers:
            return self._change_here(state, leavers, joiners)
        # A leaver must be gone within its agent's deadline, store or not:
        # its waits are bounded, and if the store is away it leaves without
        # the record (the others see it go as a crash, recovered once the
        # store is back: at most the step in flight).
        try:
            with self.members.store.patient(LEAVER_PATIENCE_S):
                return self._change_here(state, leavers, joiners)
        except StoreAway as e:
            log.warning("mccl.elastic: leaving without the next generation's record: %s", e)
            self._drop_group()
            self._note(Change(self.generation + 1, "leave", 0, left=[self.id], step=state.step))
            return "left"

    def _barrier(self, leaving: bool) -> None:
        """The old group's last barrier; a leaver's is bounded (a member that
        waits for the store before it can pass is not waited for)."""
        if not leaving:
            dist.barrier()
            return
        work = dist.barrier(async_op=True)
        if work is not None:
            try:
                work.wait(timeout=timedelta(seconds=LEAVER_PATIENCE_S))
            except RuntimeError as e:
                if "not complete after" not in str(e):
                    raise
                raise StoreAway(f"the others did not pass the last barrier within {LEAVER_PATIENCE_S:g} s "
                                "(they wait for the store)") from e

    def _change_here(self, state, leavers: list[int], joiners: int) -> str:
        t0 = time.monotonic()
        leaving = self.rank in leavers
        rec, n = self.record, self.generation
        old = list(rec.members)
        stay = [mid for r, mid in enumerate(old) if r not in leavers]
        if not stay:
            return self._leave_all(state, n, rec, old, t0)
        if not joiners:
            # Every member computes the same next generation and writes it
            # (the same record: whoever is first), so no member's death
            # leaves it unwritten.
            mine = decisions.at_boundary(rec, leavers, [], rec.admitted, state.step, self.members.why)
            # Every member passed the boundary: a member whose boundary op
            # failed (it is recovering generation n) fails this barrier here
            # too, so no one shrinks past it.
            self._barrier(leaving)
            # The ones that stay write it (a leaver need not: it must be quick).
            nxt = mine if leaving else self._publish(n + 1, mine)
            if nxt != mine:
                # Members that failed at this boundary recovered generation n
                # meanwhile: go through that recovery too.
                raise _Regroup(f"mccl.elastic: generation {n + 1} is a {nxt.cause.value} record written by "
                               f"members that failed at step {state.step}")
        else:
            if stay[0] == self.id:
                # One member looks at the joiners (those still waiting) and
                # publishes; the others read what it wrote.
                admitted = rec.admitted + joiners
                fresh = self.members.live_requests(rec.admitted + 1, admitted, fresh_s=5.0, beats=self._beats)
                self._publish(n + 1, decisions.at_boundary(rec, leavers, fresh, admitted, state.step,
                                                           self.members.why))
            # The record is there once this barrier of the old group ends; a
            # decider that dies before writing it fails the barrier (a
            # failure recovered as any other) instead of leaving the others
            # waiting on the store.
            self._barrier(leaving)
            nxt = self.members.generation(n + 1)
            if nxt.cause in (Cause.CRASH, Cause.REGROUP):
                raise _Regroup(f"mccl.elastic: generation {n + 1} is a {nxt.cause.value} record written by "
                               f"members that failed at step {state.step}")
            for who, why in nxt.refused.items():
                log.warning("mccl.elastic: refused %s: %s", who, why)
        left = [old[r] for r in leavers]
        joined = list(nxt.members[len(stay):])
        # A sharded state is whole nowhere: gather it (leavers too) to the
        # member that will be rank 0 of the next generation.
        full = state.gather(dst=old.index(stay[0])) if state.sharded and (joined or leavers) else None
        if self.rank in leavers:
            # This member is done with the old group: the others may drop it
            # now (see _await_leavers).
            self.members.set(f"pg/{n}/left/{self.rank}", "1", patience=2.0)
            dist.destroy_process_group()
            self._note(Change(n + 1, nxt.cause.value, len(nxt.members), left=left, joined=joined,
                              stall_s=time.monotonic() - t0, step=state.step))
            return "left"
        if not joined and not leavers:
            # The joiners counted had stopped waiting (died, gave up) or were
            # refused: the group goes on as it is; the generation records
            # their requests as handled, so they are not counted again.
            self._move_to(n + 1, nxt)
            self._note(Change(n + 1, "pass", self.world, stall_s=time.monotonic() - t0, step=state.step))
            return "unchanged"
        if not joined:
            # Leavers only: the same connections, renumbered (no rendezvous).
            self._await_leavers(n, leavers)
            self._shrink(n + 1, nxt, leavers, abort=False)
            sent = state.rebuild(full) if state.sharded else 0
            self._note(Change(n + 1, "leave", self.world, left=left, stall_s=time.monotonic() - t0,
                              state_bytes=sent, step=state.step))
            return "shrunk"
        t1 = time.monotonic()
        if leavers:
            self._await_leavers(n, leavers)  # leavers out of the old group first (as for a shrink)
        dist.destroy_process_group()
        t2 = time.monotonic()
        self._init_group(n + 1, nxt, after=n)
        t3 = time.monotonic()
        # Members hold the state already: one hands it to the joiners (DDP),
        # or all reshard it.
        sent = state.rebuild(full) if state.sharded else self._deliver(state, holds=True)
        t4 = time.monotonic()
        self._note(Change(n + 1, "join", self.world, left=left, joined=joined, stall_s=t4 - t0,
                          state_bytes=sent, step=state.step,
                          parts={"agree_s": t1 - t0, "old_group_s": t2 - t1, "new_group_s": t3 - t2,
                                 "state_s": t4 - t3}))
        return "joined"

    def _leave_all(self, state, n: int, rec: Generation, old: list[str], t0: float) -> str:
        """Every member leaves at this boundary (the fleet's dawn): the job
        goes dormant, its state in a checkpoint that rank 0 writes now (a
        sharded state: every rank its shards), so the next member to come
        resumes at exactly this step. Without a checkpoint folder the state
        cannot be kept and the job ends."""
        rank = self.rank
        name = self._durable.save_now(state, "dormant", self._meta()) if self._durable.enabled else ""
        if rank == 0:
            self._publish(n + 1, decisions.after_leaving_all(rec, state.step, name))
        else:
            # Rank 0 names the checkpoint: wait for its record (briefly: a
            # leave must be quick; without it, the next member finds the
            # job's members silent and resumes from its newest checkpoint).
            end = time.monotonic() + 5.0
            while not self.members.has(f"g/{n + 1}", patience=1.0) and time.monotonic() < end:
                time.sleep(0.02)
        dist.destroy_process_group()
        cause = Cause.DORMANT if name else Cause.END
        self._note(Change(n + 1, cause.value, 0, left=old, stall_s=time.monotonic() - t0, step=state.step))
        if rank == 0:
            if name:
                log.warning("mccl.elastic: every member left: job %r is dormant at step %d (checkpoint %s); "
                            "the next member to come resumes it", self.members.job, state.step, name)
            else:
                log.warning("mccl.elastic: every member left and job %r has no checkpoint folder: it ended at "
                            "step %d", self.members.job, state.step)
        return "left"

    def _await_leavers(self, n: int, leavers: list[int]) -> None:
        """Waits (a few seconds at most) until every leaver is through the old
        group's last barrier. The barrier ends on each rank as its own last
        message arrives, and shrinking drops the connections to the leavers:
        a member that shrank while a leaver was still inside it made the
        leaver's barrier fail, and the leaver's abort failed the members
        still in it (a regroup for nothing). A leaver that died after the
        barrier is not waited for longer than the bound."""
        keys = [f"pg/{n}/left/{r}" for r in leavers]
        end = time.monotonic() + min(5.0, self.timeout.total_seconds())
        watches = self._watches()
        try:
            while time.monotonic() < end:
                # Through, or gone: a leaver whose process ended (its beacon
                # closed) is through the barrier, whatever the store says (a
                # leaver during a store outage could not say so there).
                try:
                    if self.members.has_all(keys, patience=1.0):
                        return
                except StoreAway:
                    pass
                if all(watches.dead(self.record.members[r]) for r in leavers):
                    return
                time.sleep(0.002)
        finally:
            watches.close()

    def _shrink(self, n: int, nxt: Generation, excluded: list[int], abort: bool) -> None:
        """Generation n without `excluded`: the live group shrunk over its
        own connections where torch has shrink_group (2.10+), else a new
        group of the same members."""
        if hasattr(dist, "shrink_group"):
            c10d = dist.distributed_c10d
            dist.shrink_group(excluded, shrink_flags=c10d.SHRINK_ABORT if abort else c10d.SHRINK_DEFAULT)
            self._move_to(n, nxt)
            self._formed = True
        else:
            dist.destroy_process_group()
            self._init_group(n, nxt)

    def _deliver(self, state, holds: bool) -> int:
        """The job's state to the ranks of this generation whose state is not
        (`holds` False), from the lowest rank whose is; the others only say so."""
        from .state import deliver_state
        return deliver_state(state, holds)

    @staticmethod
    def _backend():
        """This generation's MCCL backend (None: no group, or another backend)."""
        try:
            return dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        except Exception:  # noqa: BLE001 - no group, or not an mccl one
            return None

    def _failed_peers(self) -> list[int]:
        return list(getattr(self._backend(), "failed_peers", []))

    @staticmethod
    def _drop_group() -> None:
        """Destroys this generation's group, if it formed."""
        if dist.is_initialized():
            dist.destroy_process_group()

    # ---- recovery after a failure ------------------------------------------------------
    def _recover_until_formed(self, state, error: Exception) -> None:
        """_recover, again for each failure during it (another member died
        while the survivors regrouped): each round recovers the generation
        the last one got to."""
        while True:
            try:
                self._recover(state, error)
                return
            except (dist.DistBackendError, RuntimeError, _CheckpointException) as e:
                if isinstance(e, (Excluded, JobStopped)) or not self._is_comm_failure(e):
                    raise
                error = e

    def _left_in_recovery(self, n: int, rec: Generation | None, state) -> None:
        """A member that asked to leave met a failure on its way out (often its
        own leave boundary's, when the others had already gone on without
        it) and is not in generation n: what it asked for. Raises _Left."""
        log.warning("mccl.elastic: generation %d goes on without this member, which asked to leave: left", n)
        self._note(Change(n, rec.cause.value if rec else "crash", len(rec.members) if rec else 0,
                          left=[self.id], step=state.step))
        raise _Left()

    def _stop_error(self, kind: str, error: BaseException, samples=None) -> dict:
        return {"kind": kind, "member": self.id, "rank": self.rank if dist.is_initialized() else -1,
                "step": self._step_of_error, "samples": samples, "error": f"{type(error).__name__}: {error}"[:2000],
                "traceback": "".join(traceback.format_exception(error))[-6000:]}

    def _recover(self, state, error: Exception, stop: dict | None = None) -> None:
        """After a failure of generation n (its group failed, or never
        formed): the survivors among the members its record lists agree on
        the dead, follow generation n + 1's record (theirs, or one a member
        wrote before it failed) and make every member's state the job's.
        `stop`: this member's own reason to stop the job (train_step raised
        here, or this rank saw the ranks disagree): the job stops on every
        member instead."""
        self._durable.fence()
        t0 = time.monotonic()
        n, formed = self.generation, self._formed
        rec = self.record
        old = list(rec.members)
        world, rank = len(old), old.index(self.id)
        log.warning("mccl.elastic: generation %d %s at step %d: %s", n, "failed" if formed else "did not form",
                    state.step, str(error)[:300])
        m = self.members
        peers_failed = self._failed_peers() if formed else []

        def check_in():
            # -1: this member's state is not the job's yet (a joiner before its
            # first state), so it takes the state of one whose is.
            m.set(f"rec/{n}/step/{rank}", str(state.step if self._synced else -1))
            m.set(f"rec/{n}/formed/{rank}", "1" if formed else "0")
            m.check_in(n, rank, peers_failed)
        if stop is not None:
            m.set_json(f"rec/{n}/error/{rank}", stop)
        check_in()
        if stop is not None:
            self._drop_group()  # the others' ops with this rank fail now, not at a timeout
        # A group that never formed is seen to fail at each member's own
        # timeout: wait that long for the others (a member proven dead by
        # its beacon is not waited for). And while the job has state
        # (step > 0), no decision without a member that holds it: a joiner
        # that saw the failure first must not decide alone that every member
        # is dead.
        grace = self.crash_grace_s if formed else self.timeout.total_seconds() + max(5.0, self.crash_grace_s)
        trained = rec.step > 0  # the job has state to lose
        holder_s = 2 * self.timeout.total_seconds() if trained else 0.0
        watches = self._watches()
        try:
            # A member whose process is there (its beacon answers) but that
            # has not checked in may be inside a long step: it hears of the
            # failure at its next collective. It is waited for up to timeout_s.
            d = m.decide(n, world, grace, holder_s=holder_s, presumed_s=self.crash_grace_s,
                         is_dead=lambda r: watches.dead(old[r]), is_alive=lambda r: watches.alive(old[r]),
                         alive_grace_s=self.timeout.total_seconds(), recheck=check_in)
        finally:
            watches.close()
        if rank in d["dead"]:
            self._drop_group()
            nxt = m.generation(n + 1) if m.has(f"g/{n + 1}") else None
            if nxt is not None and nxt.cause is Cause.END:
                raise _Done()
            if self._leave:
                self._left_in_recovery(n + 1, nxt, state)
            raise Excluded(f"mccl.elastic: {self.id} was left out of generation {n + 1}: the other members "
                           f"decided it had failed (they saw its connections fail, or it did not check in "
                           f"within {grace:g} s of the failure); its agent may start it again to join anew")
        dead = d["dead"]
        steps = {int(r): s for r, s in d["steps"].items()}
        top = max(steps.values())
        mine = decisions.after_failure(rec, dead, steps)
        if top < 0 and trained:
            # Every member that held the job's state is gone: only newcomers
            # (joiners, or resumers before their first state) are left. They
            # take the job up from its checkpoint, if it has one.
            ref = self._durable.latest() if self._durable.enabled else None
            if ref is None:
                self._drop_group()
                raise RuntimeError(f"mccl.elastic: generation {n} failed with every member that held the job's "
                                   f"state (step {rec.step}); only newcomers survive, and the job has no "
                                   "checkpoint to go on from")
            mine = dataclasses.replace(mine, cause=Cause.RESUME, step=ref.step, checkpoint=ref.name)
        errors = [e for e in (self._error_of(n, r) for r in range(world)) if e]
        if not errors and deterministic(error):
            errors = [self._stop_error("mismatch", error)]
        if not errors and decisions.looping(m.recent(n, decisions_window()), mine, REGROUP_LIMIT):
            errors = [self._stop_error("loop", RuntimeError(
                f"generation {n} failed at step {mine.step} with the same members {REGROUP_LIMIT} times in a row; "
                f"the last failure: {str(error)[:500]}"))]
        if errors:
            self._stop(state, n, rec, d, steps, errors[0])
        # Every survivor computes the same record and writes it; whoever is
        # first, it is the same.
        nxt = self._publish(n + 1, mine)
        if nxt.cause is Cause.STOPPED:
            self._drop_group()
            raise self._stopped_error(nxt)
        if nxt.cause is Cause.END:
            # The job's last step was committed and the end written before the
            # failure (a member failed in the final barrier): the job is over.
            self._drop_group()
            raise _Done()
        if nxt != mine:
            # A member wrote generation n + 1 before the failure (a join it
            # had decided): its group cannot form as written (one it lists is
            # dead, or recovering here). Every process it lists, joiners too,
            # meets again in the recovery of that generation.
            self._drop_group()
            if self.id not in nxt.members:
                if self._leave:
                    self._left_in_recovery(n + 1, nxt, state)
                raise Excluded(f"mccl.elastic: {self.id} is not a member of generation {n + 1}")
            # Those dead here are presumed dead there: waited for only as
            # long as a crash (not the unformed group's timeout). Not taken
            # for dead at once: one may be alive, having passed the old
            # group's last op (a member that left it looks like a failure)
            # and waiting in the new group's rendezvous, from which it comes
            # to this recovery within moments (_meet_rank0).
            presumed = [nxt.members.index(old[r]) for r in dead if old[r] in nxt.members]
            if presumed:
                m.store.append(m.key(f"rec/{n + 1}/presumed"), "".join(f"{r}," for r in presumed))
            self._move_to(n + 1, nxt)
            self._formed = False
            raise _Regroup(f"mccl.elastic: generation {n + 1} ({nxt.cause.value}) was written before the "
                           f"failure of generation {n}; recovering it")
        # Shrink only if every survivor's group formed (one whose rendezvous
        # timed out has nothing to shrink): else all make a fresh one.
        everyone_formed = all(m.get(f"rec/{n}/formed/{r}").decode() == "1" for r in d["alive"])
        if dead and everyone_formed and dist.is_initialized():
            self._shrink(n + 1, nxt, dead, abort=True)
        else:
            # Nobody died (a timeout, a lost link), or the group never
            # formed: a fresh group of the survivors.
            self._drop_group()
            self._init_group(n + 1, nxt)
        if nxt.cause is Cause.RESUME:
            self._newcomer, self._synced = True, False  # run() takes the state up from the checkpoint
            self._note(Change(n + 1, nxt.cause.value, self.world, left=[old[r] for r in dead],
                              stall_s=time.monotonic() - t0, step=nxt.step))
            return
        # Members that had committed the failed step hand its state over; a
        # sharded state lost the dead member's shards: back to its checkpoint.
        sent = 0
        if state.sharded and nxt.step == 0:
            # Nothing trained yet (a member died as the job started, perhaps
            # before any checkpoint): start again from the new rank 0's
            # initial state.
            sent = state.rebuild(state.initial() if self.rank == 0 else None)
            log.warning("mccl.elastic: no step was committed: the state was built afresh")
        elif state.sharded:
            lost = state.restore()
            log.warning("mccl.elastic: rolled back %d step(s) to the checkpoint of step %d", lost, state.step)
        elif min(steps.values()) != top or top < 0:
            src = min(nxt.members.index(old[r]) for r, s in steps.items() if s == top)
            load = steps[rank] != top or (top < 0 and self.rank != src)
            sent = self._deliver(state, holds=not load)
        self._newcomer, self._synced = False, True
        self._note(Change(n + 1, nxt.cause.value, self.world, left=[old[r] for r in dead],
                          stall_s=time.monotonic() - t0, state_bytes=sent, step=state.step))

    def _error_of(self, n: int, rank: int) -> dict | None:
        raw = self.members.maybe(f"rec/{n}/error/{rank}")
        if raw is None:
            return None
        try:
            return json.loads(raw.decode())
        except ValueError:
            return {"kind": "error", "error": raw.decode(errors="replace")[:2000]}

    def _stop(self, state, n: int, rec: Generation, d: dict, steps: dict, error: dict) -> None:
        """Every survivor of generation n's failure stops the job on `error`.
        The survivor that holds the newest state (the first such rank)
        writes it to the checkpoint folder and publishes the stop; the
        others wait for its record (and write one without a checkpoint if
        it never comes). Raises JobStopped on every member."""
        self._drop_group()
        top = max(steps.values())
        writer = min(r for r, s in steps.items() if s == top)
        survivors = [rec.members[r] for r in d["alive"]]
        m = self.members
        if steps.get(rec.members.index(self.id)) == top and rec.members.index(self.id) == writer:
            name = ""
            if self._durable.enabled and not state.sharded and top >= 0:
                try:
                    name = self._durable.save_now(state, "stopped", self._meta(), writer=True)
                except Exception as e:  # noqa: BLE001 - the stop must be published all the same
                    log.error("mccl.elastic: saving the state of the stopped job failed: %s", e)
            elif state.sharded and state.checkpoint_step is not None:
                name = state.checkpoint_name
            held = self._publish(n + 1, decisions.stopped(rec, max(top, 0), error, name, survivors))
        else:
            end = time.monotonic() + self.timeout.total_seconds()
            while not m.has(f"g/{n + 1}") and time.monotonic() < end:
                time.sleep(0.05)
            held = m.generation(n + 1) if m.has(f"g/{n + 1}") else \
                self._publish(n + 1, decisions.stopped(rec, max(top, 0), error, "", survivors))
        self._note(Change(n + 1, held.cause.value, 0, step=held.step), history=writer == rec.members.index(self.id))
        self._move_to(n + 1, held)
        raise self._stopped_error(held)

    def _stopped_error(self, rec: Generation) -> JobStopped:
        e = rec.error
        if rec.checkpoint:
            where = f"checkpoint {rec.checkpoint}"
        elif self._durable.enabled:
            where = (f"no checkpoint of that step (saving it failed, or its writer died; {self._durable.where} "
                     "holds the newest periodic save)")
        else:
            where = "no checkpoint (the job has no checkpoint folder)"
        text = (f"mccl.elastic: job {self.members.job!r} stopped at step {rec.step}: "
                f"{decisions.describe_error(e)}; the state of step {rec.step} is in {where}. "
                f"Fix the cause, then `mccl elastic resume --job {self.members.job}`.")
        if e.get("traceback"):
            text += "\n" + e["traceback"]
        return JobStopped(text, e)


def decisions_window() -> int:
    return REGROUP_LIMIT + 1
