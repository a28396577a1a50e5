"""Low-communication training on an elastic fleet: DiLoCo, and its streaming
variant, as a sibling of State that Job.run drives with a loop of its own
(diloco_loop.py).

    state = mccl.elastic.DiLoCoState(
        model, torch.optim.AdamW(model.parameters(), lr=4e-4),            # inner optimizer
        torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True),  # outer
        mccl.elastic.ElasticSampler(len(data), batch=32), H=100, wire_dtype="bf16",
        fragments=4)                                                     # streaming (optional)
    job.run(state, train_step, steps=100_000)   # train_step(model, indices): forward + backward

Every member trains H inner steps on its own samples with the inner
optimizer, exchanging nothing. The job's global parameters change only by
outer steps: a member's pseudo-gradient (the global parameters minus its
local ones) is summed over the members by one all-reduce (on a group whose
float32 sums travel as `wire_dtype`, accumulated in float32), divided by
the number of members that trained since their last sync, and applied to
the global parameters by the outer optimizer (Nesterov momentum SGD in the
DiLoCo paper); the local parameters then take them up.

With fragments=P the model's flattened parameters are cut into P slices
whose syncs are staggered across the round and overlapped with the inner
steps (diloco_plan.Schedule says when). The delayed outer update: fragment
p's pseudo-gradient is taken at its issue point i_p and all-reduced while
the member trains `overlap` more inner steps; at a_p = i_p + overlap the
outer step is applied to the global fragment, and the member's local
fragment becomes, with merge="rebase" (the default), the new global
fragment plus what the member trained since i_p (exact DiLoCo when the
overlap is 0), or with merge="mix", alpha * local + (1 - alpha) * global
(the mixing of the Streaming DiLoCo paper, arXiv:2501.18512).

The host's work of a sync is split between the training thread and the
state's outer thread. The training thread takes the pseudo-gradient at the
issue point and puts it on the wire; while it trains the overlapped inner
steps, the outer thread waits for the sum, runs the outer optimizer on a
copy of the global fragment and its state, and works out what the local
fragment gains (the rebase). At the apply point the training thread adds
that (one pass over the fragment) and swaps the new global fragment and
state in: nothing of the job's state changes before, so a failure in
between drops the outer thread's result and the sync is issued again (no
outer step applied twice). At 1 B parameters in 4 fragments this took the
training thread's share of a 32 s round from about 3.8 s to 1.1-1.3 s on a
2-core VM (mccl-bench diloco-host; docs/benchmarks.md).

What a joiner receives (from rank 0, point to point, at a round's end only): the
global parameters, the outer optimizer's state, the data position, the
step, `extra` and `stateful`, and rank 0's buffers and frozen parameters
-- not the others' inner progress, nor an inner optimizer state (its own
starts fresh). Checkpoints hold the same.
"""

from __future__ import annotations

import collections
import copy
import threading
import time

import torch
import torch.distributed as dist

from .diloco_outer import OuterThread, Prepared, SparePool
from .diloco_plan import RoundPlan, Schedule, split
from .sampler import ElasticSampler
from .state import checked_stateful, tensor_bytes

MERGES = ("rebase", "mix")


class _Pending:
    """A fragment's sync between its issue and its application."""

    def __init__(self, raw: torch.Tensor, sent: torch.Tensor, contributes: bool):
        self.raw = raw      # global - local at the issue point (this member's own)
        self.sent = sent    # what goes into the all-reduce (raw, plus the int8 wire's residual)
        self.contributes = contributes
        self.work = None    # (sum buffer, count, works) while on the wire of this generation's group
        self.prepared = None  # Prepared: the outer step worked out off the training thread
        self.token = None     # _Token of its current issue


class _Token:
    """One issue of a sync: set when its sums are in, or cancelled (its
    group failed); the outer thread's job holds the one it was made for."""

    def __init__(self):
        self.arrived = threading.Event()
        self.cancelled = False


class DiLoCoState:
    sharded = False

    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer, outer_optimizer,
                 sampler: ElasticSampler, *, H: int = 100, wire_dtype: str = "bf16", fragments: int = 1,
                 overlap: int | None = None, merge: str = "rebase", alpha: float = 0.5,
                 error_feedback: bool = True, wire_reduce: str = "auto", extra: dict | None = None,
                 stateful: dict | None = None):
        """`outer_optimizer`: an optimizer over model.parameters() (one
        parameter group; it is rebound to the job's global parameters) or a
        function params -> optimizer. `wire_dtype`: what the outer
        all-reduce's float32 sums travel as ("fp32", "bf16", "fp16", "int8";
        mccl.Options). `fragments`, `overlap`: streaming (diloco_plan.py);
        overlap None means 0 with one fragment and the whole gap between
        fragments with more. `error_feedback`: on the int8 wire, what the
        wire dropped of a fragment's pseudo-gradient is added to its next one
        (as mccl.hooks.int8_allreduce_hook does). `wire_reduce`: how a 16-bit
        wire reduces (mccl.Options: "auto", "ring", "pairwise")."""
        from ..options import WIRE_DTYPES, WIRE_REDUCES
        if wire_reduce not in WIRE_REDUCES:
            raise ValueError(f"mccl.elastic.DiLoCoState: wire_reduce {wire_reduce!r} is not one of "
                             f"{', '.join(WIRE_REDUCES)}")
        self.wire_reduce = wire_reduce
        if wire_dtype not in WIRE_DTYPES:
            raise ValueError(f"mccl.elastic.DiLoCoState: wire_dtype {wire_dtype!r} is not one of "
                             f"{', '.join(WIRE_DTYPES)}")
        if merge not in MERGES or not 0.0 <= alpha <= 1.0:
            raise ValueError(f"mccl.elastic.DiLoCoState: merge must be one of {MERGES} and alpha in [0, 1]")
        self.model, self.optimizer, self.sampler = model, inner_optimizer, sampler
        self.schedule = Schedule(H, fragments, overlap)
        self.H, self.wire_dtype, self.merge, self.alpha = H, wire_dtype, merge, alpha
        self.error_feedback = error_feedback and wire_dtype == "int8"
        self.extra = dict(extra or {})
        self.stateful = checked_stateful(stateful)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("mccl.elastic.DiLoCoState: the model has no trainable parameters")
        # The outer step's arithmetic: float64 for a float64 model, else float32
        # (a bfloat16 model keeps float32 global parameters and momentum).
        self.master = torch.float64 if all(p.dtype == torch.float64 for p in self.params) else torch.float32
        self.pieces = split([p.numel() for p in self.params], fragments)
        self.globals = [torch.nn.Parameter(self._gather(f).to(self.master, copy=True), requires_grad=False)
                        for f in range(fragments)]
        self.outer = self._bind(outer_optimizer)
        # ---- the job's (state_dict): changed by outer steps and round ends only
        self.step = 0                      # the job's inner steps at its last outer update
        self.round_index = -1
        self.round_start = 0               # the job's inner steps at this round's start
        self.round_members: tuple = ()     # member ids; a member's index is its data rank
        self.owed: list[tuple[int, int]] = []
        self.done_round = [-1] * fragments  # the round in which each fragment was last applied
        # ---- this member's own
        self.at = self.END                 # actions of the round done (diloco_loop.py)
        self.plan: RoundPlan | None = None
        self.pending: dict[int, _Pending] = {}
        self.since_issue = [0] * fragments  # own inner steps since each fragment's last issue
        self.residual: dict[int, torch.Tensor] = {}
        self._bufs: dict[tuple[int, int], torch.Tensor] = {}
        self.local_live = False            # this member trains in a round (a load merges, not replaces)
        self.outer_wire = ""               # what MCCL runs the outer all-reduce as ("ring_wire (bf16)")
        self.syncs: list[dict] = []        # recent applications: round, fragment, count, seconds waited
        self.inner_clock = 0               # the job's inner steps, as this member has trained them
        self._outer_thread: OuterThread | None = None  # works out outer steps off the training thread
        self._pool = SparePool()  # tensors the outer steps' swaps freed, for the next copies

    # ---- layout ---------------------------------------------------------------
    BOUNDARY = property(lambda self: 2 * self.H + 1)   # the round's end: its flags op and change
    END = property(lambda self: 2 * self.H + 2)        # between rounds

    def _views(self, f: int, source=None) -> list[torch.Tensor]:
        ps = self.params if source is None else source
        return [ps[i].detach().view(-1)[a:b] for i, a, b in self.pieces[f]]

    def _gather(self, f: int) -> torch.Tensor:
        """The local parameters of fragment f as one flat tensor (a copy)."""
        return torch.cat([v.to(self.master) for v in self._views(f)])

    def _slices(self, f: int):
        """Fragment f's local parameters, each with its place in the flat
        fragment: (view, start, end). Elementwise work over a fragment goes
        view by view against slices of the flat tensors, with no gathered
        copy of the fragment (a model of many tensors)."""
        off = 0
        for v in self._views(f):
            yield v, off, off + v.numel()
            off += v.numel()

    def _scatter(self, f: int, flat: torch.Tensor) -> None:
        off = 0
        with torch.no_grad():
            for v in self._views(f):
                v.copy_(flat[off:off + v.numel()])
                off += v.numel()

    def _bind(self, outer):
        if callable(outer) and not isinstance(outer, torch.optim.Optimizer):
            return outer(self.globals)
        if not isinstance(outer, torch.optim.Optimizer):
            raise TypeError("mccl.elastic.DiLoCoState: outer_optimizer must be a torch optimizer or a function "
                            "params -> optimizer")
        held = [p for g in outer.param_groups for p in g["params"]]
        if len(outer.param_groups) != 1 or {id(p) for p in held} != {id(p) for p in self.params}:
            raise ValueError("mccl.elastic.DiLoCoState: outer_optimizer must hold the model's trainable "
                             "parameters in one parameter group (or pass a function params -> optimizer)")
        if outer.state:
            raise ValueError("mccl.elastic.DiLoCoState: outer_optimizer has stepped already")
        outer.param_groups[0]["params"] = list(self.globals)
        return outer

    def outer_loop(self, job, train_step, steps: int, on_step=None) -> str:
        """Job.run hands a DiLoCoState to this loop (diloco_loop.py)."""
        from .diloco_loop import run
        return run(job, self, train_step, steps, on_step)

    def signature_lines(self) -> list[str]:
        """What a joiner must share with the job (mccl.elastic.signature)."""
        s = self.schedule
        return [f"diloco H={self.H} fragments={s.fragments} overlap={s.tau} wire={self.wire_dtype} "
                f"wire_reduce={self.wire_reduce} "
                f"merge={self.merge} alpha={self.alpha if self.merge == 'mix' else '-'} "
                f"error_feedback={self.error_feedback}",
                f"outer optimizer {type(self.outer).__module__}.{type(self.outer).__qualname__} "
                f"({', '.join(sorted(k for k in self.outer.param_groups[0] if k != 'params'))})"]

    # ---- the job's state ----------------------------------------------------------
    def _rest(self) -> dict:
        """Buffers and frozen parameters: local, sent to joiners from rank 0 as they are."""
        trainable = {id(p) for p in self.params}
        named = dict(self.model.named_parameters())
        return {k: v for k, v in self.model.state_dict().items()
                if not (k in named and id(named[k]) in trainable)}

    def state_dict(self) -> dict:
        """The job's state, as views of the live tensors (copy what you keep:
        the next outer step replaces the global fragments and the outer
        state, and their old storage is reused for later steps)."""
        return {"globals": [g.detach() for g in self.globals], "outer": self.outer.state_dict(),
                "sampler": self.sampler.state_dict(), "owed": list(self.owed), "step": self.step,
                "round": {"index": self.round_index, "start": self.round_start, "members": list(self.round_members)},
                "done_round": list(self.done_round), "rest": self._rest(), "extra": self.extra,
                "stateful": {k: v.state_dict() for k, v in self.stateful.items()}}

    def load_state_dict(self, sd: dict) -> None:
        """The job's state from another member (or a checkpoint). A member
        that trains in a round (a survivor of a failure whose outer updates
        lag the sender's) keeps its inner progress: each fragment the sender
        applied and it did not is merged as at an application. Any other
        member takes the global parameters as its local ones and starts at
        the next round."""
        got = sorted(sd.get("stateful", {}))
        if got != sorted(self.stateful):
            raise ValueError(f"mccl.elastic.DiLoCoState: the sender's stateful objects are {got}, this member's "
                             f"{sorted(self.stateful)}: every member must pass the same names")
        if len(sd["globals"]) != len(self.globals):
            raise ValueError(f"mccl.elastic.DiLoCoState: the sender has {len(sd['globals'])} fragments, this "
                             f"member {len(self.globals)}")
        live = self.local_live
        for f, g in enumerate(sd["globals"]):
            new = g.to(self.master)
            if live and sd["done_round"][f] != self.done_round[f]:
                self._merge(f, new)
            elif not live:
                self._scatter(f, new)
            with torch.no_grad():
                self.globals[f].copy_(new)
        self.outer.load_state_dict(sd["outer"])
        self.sampler.load_state_dict(sd["sampler"])
        self.owed = [tuple(x) for x in sd["owed"]]
        self.step = int(sd["step"])
        self.done_round = [int(x) for x in sd["done_round"]]
        r = sd["round"]
        newer = int(r["index"]) != self.round_index
        self.round_index, self.round_start, self.round_members = int(r["index"]), int(r["start"]), tuple(r["members"])
        self.extra = dict(sd["extra"])
        for k, v in self.stateful.items():
            v.load_state_dict(sd["stateful"][k])
        if not live:
            if sd["rest"]:
                self.model.load_state_dict(sd["rest"], strict=False)
            self.pending.clear()
            self.residual.clear()
            self.since_issue = [0] * len(self.globals)
            self.at, self.plan = self.END, None
            self.inner_clock = self.step
        elif newer:
            # The sender began the next round (this member was at this one's
            # end): this member has done nothing of it yet.
            self.at, self.plan = 0, None

    def nbytes(self) -> int:
        return tensor_bytes(self.state_dict())

    # ---- a round --------------------------------------------------------------------
    def start_round(self, members: tuple, index: int | None = None, start: int | None = None) -> None:
        """The next round (or the one named), of `members` (ids, in rank order)."""
        if index is None:
            index = self.round_index + 1
            start = self.round_start + self.H if self.round_index >= 0 else self.step
        self.round_index, self.round_start, self.round_members = index, start, tuple(members)
        self.plan = None
        self.at = 0
        self.local_live = True

    def data_plan(self) -> RoundPlan:
        if self.plan is None:
            self.plan = RoundPlan(self.sampler, self.owed, len(self.round_members), self.H)
        return self.plan

    def slot(self, k: int, me: str) -> list[int] | None:
        """This member's samples at inner step k (None: it is not a member of
        this round, as after a rare recovery: it trains nothing until the
        next)."""
        if me not in self.round_members:
            return None
        return self.data_plan().slot(k, self.round_members.index(me))

    def _buffer(self, f: int, which: int) -> torch.Tensor:
        """Fragment f's pseudo-gradient (0) or all-reduce (1) buffer, kept from
        round to round (a fragment has one sync at a time): no fresh pages
        of a fragment's size at every sync."""
        key = (f, which)
        buf = self._bufs.get(key)
        if buf is None:
            buf = self._bufs[key] = torch.empty_like(self.globals[f].detach())
        return buf

    def trained(self) -> None:
        for f in range(len(self.since_issue)):
            self.since_issue[f] += 1

    # ---- outer syncs -----------------------------------------------------------------
    def hold(self, f: int) -> None:
        """Fragment f's pseudo-gradient at its issue point, kept until applied."""
        raw = self._buffer(f, 0)
        g = self.globals[f].detach()
        for v, a, b in self._slices(f):
            torch.sub(g[a:b], v, out=raw[a:b])
        contributes = self.since_issue[f] > 0
        if not contributes:
            raw.zero_()
        sent = raw
        if self.error_feedback and contributes:
            from ..hooks import int8_round_trip
            res = self.residual.get(f)
            sent = raw + res if res is not None else raw.clone()
            wire = sent.float()
            self.residual[f] = (wire - int8_round_trip(wire)).to(self.master)
        self.pending[f] = _Pending(raw, sent, contributes)
        self.since_issue[f] = 0

    def issue(self, f: int, group) -> None:
        """Puts fragment f's held pseudo-gradient on the wire (async); the
        state's outer thread works out the outer step once the sum is in,
        with the outer optimizer's hyperparameters as they are now (the
        issue point: the same on every member)."""
        p = self.pending[f]
        t0 = time.perf_counter()
        buf = self._buffer(f, 1).copy_(p.sent)
        count = torch.tensor([1 if p.contributes else 0], dtype=torch.int64)
        p.issued_at, p.done_at = time.perf_counter(), None
        w1 = dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group, async_op=True)
        w2 = dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group, async_op=True)
        token = p.token = _Token()
        try:  # when the sums arrived (MCCL's completion thread): the sync's time on the wire
            lock, left = threading.Lock(), [2]

            def arrived(_f, p=p, sum_buffer=False):
                if sum_buffer:
                    p.done_at = time.perf_counter()
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        token.arrived.set()
            w1.get_future().add_done_callback(lambda f_: arrived(f_, sum_buffer=True))
            w2.get_future().add_done_callback(arrived)
        except (AttributeError, RuntimeError):
            token.arrived.set()  # no futures: the outer thread waits on the works themselves
        p.work = (buf, count, (w1, w2))
        p.issue_s = time.perf_counter() - t0  # the copy and putting it on the wire: the loop's, not compute
        hyper = self._hyperparameters(f) if self._steps_off_thread() else None
        if self._outer_thread is None:
            self._outer_thread = OuterThread()
        p.prepared = self._outer_thread.submit(
            lambda out, f=f, p=p, work=p.work, token=token: self._prepare(f, p, work, token, hyper, out))

    def _steps_off_thread(self) -> bool:
        """Whether the outer thread may step a copy of the outer optimizer:
        a torch.optim class without hooks of its own (a copy keeps only the
        defaults, groups and state). Otherwise apply() steps the optimizer
        itself, on the training thread."""
        o = self.outer
        cls = type(o)
        return (cls.__module__.startswith("torch.optim.") and cls is not torch.optim.LBFGS
                and not getattr(o, "_optimizer_step_pre_hooks", None)
                and not getattr(o, "_optimizer_step_post_hooks", None))

    def _hyperparameters(self, f: int) -> dict:
        g = self.globals[f]
        group = next(gr for gr in self.outer.param_groups if any(q is g for q in gr["params"]))
        return {k: (v.clone() if torch.is_tensor(v) else copy.copy(v)) for k, v in group.items() if k != "params"}

    def _prepare(self, f: int, p: _Pending, work, token, hyper: dict | None, out: Prepared) -> None:
        """The outer thread's part of fragment f's sync (see OuterThread):
        into new tensors only; the job's global fragment, the outer
        optimizer's state and the local parameters are apply()'s to change.
        `hyper` None: the step is left to apply() (_steps_off_thread)."""
        buf, count, works = work
        if token is not None:
            token.arrived.wait()
            if token.cancelled:
                raise RuntimeError("mccl.elastic: DiLoCo: this sync's group failed; it is issued again")
        for w in works:
            w.wait()
        t0 = time.perf_counter()
        n = out.count = int(count[0])
        if hyper is None:
            out.step_here = n > 0
            return
        g = self.globals[f]
        old = g.detach()
        if n > 0:
            shadow = torch.nn.Parameter(self._pool.take(old).copy_(old), requires_grad=False)
            shadow.grad = buf.div_(n)
            # A copy of the outer optimizer (Optimizer.__getstate__: its
            # defaults, groups and state; no hooks, nor an LR scheduler's
            # wrapper of step) over the shadow alone, with the issue point's
            # hyperparameters and a copy of the fragment's state.
            opt = copy.copy(self.outer)
            opt.param_groups = [dict(hyper, params=[shadow])]
            opt.state = collections.defaultdict(dict)
            held = self.outer.state.get(g)
            if held:
                opt.state[shadow] = {k: self._pool.take(v).copy_(v) if torch.is_tensor(v) else copy.deepcopy(v)
                                     for k, v in held.items()}
            with torch.no_grad():
                type(self.outer).step(opt)
            shadow.grad = None
            out.new, out.outer_state = shadow.detach(), opt.state.get(shadow)
        if self.schedule.tau > 0 and self.merge == "rebase":
            # buf is free now (the sum is in the step): (raw - old) + new, the
            # order _merged uses, so that both ways give the same bits.
            out.delta = torch.sub(p.raw, old, out=buf).add_(out.new if out.new is not None else old)
        out.seconds = time.perf_counter() - t0

    def apply(self, f: int, point: int) -> dict:
        """Waits for fragment f's outer step (worked out by the outer thread)
        and takes it up: the global fragment and the outer optimizer's state
        swapped for the new ones, the local fragment merged."""
        p = self.pending[f]
        t0 = time.perf_counter()
        if p.prepared is None:  # not issued on this group: at once, here
            if p.work is None:
                raise RuntimeError(f"mccl.elastic: DiLoCo: fragment {f}'s sync was never issued on this group")
            p.prepared = Prepared()
            self._prepare(f, p, p.work, None, self._hyperparameters(f) if self._steps_off_thread() else None,
                          p.prepared)
            p.prepared.done.set()
        prep = p.prepared.result()
        waited = time.perf_counter() - t0
        n = prep.count
        g = self.globals[f]
        t1 = time.perf_counter()
        old = g.detach()
        before = self.outer.state.get(g)
        if prep.step_here:
            # An optimizer the outer thread does not copy: stepped here, in place.
            old = old.clone()
            g.grad = p.work[0].div_(n)
            for other in self.globals:
                if other is not g:
                    other.grad = None
            self.outer.step()
            g.grad = None
        elif prep.new is not None:
            g.data = prep.new
            if prep.outer_state is None:
                self.outer.state.pop(g, None)
            else:
                self.outer.state[g] = prep.outer_state
            self.outer._opt_called = True  # it stepped (an LR scheduler asks)
        slices = list(self._slices(f))
        if prep.delta is not None and all(v.dtype == self.master for v, _, _ in slices):
            with torch.no_grad():
                for v, a, b in slices:
                    v.add_(prep.delta[a:b])
            self.pending.pop(f, None)
        else:
            self._merge(f, g.detach(), p, old)
        if prep.new is not None:
            # The tensors the swap replaced serve the next outer steps' copies
            # (no fresh pages, no unmapping here).
            self._pool.give(old)
            for v in (before or {}).values():
                if torch.is_tensor(v):
                    self._pool.give(v)
        self.done_round[f] = self.round_index
        self.step = self.round_start + point
        wire = (p.done_at - p.issued_at) if getattr(p, "done_at", None) else None
        rec = {"round": self.round_index, "fragment": f, "count": n, "waited_s": waited, "point": point,
               "wire_s": wire, "host_s": time.perf_counter() - t1, "issue_s": getattr(p, "issue_s", 0.0),
               "outer_thread_s": prep.seconds, "t": time.perf_counter()}
        self.syncs.append(rec)
        del self.syncs[:-1000]
        return rec

    def _merge(self, f: int, new: torch.Tensor, p: _Pending | None = None, old: torch.Tensor | None = None) -> None:
        """The local fragment once the global one (`old`, by default the one
        held) becomes `new`."""
        p = p if p is not None else self.pending.get(f)
        old = self.globals[f].detach() if old is None else old
        if p is None or self.schedule.tau == 0:
            self._scatter(f, new)
        else:
            # View by view, in the fragment's dtype (the master's), each one
            # rounded to its parameter's once: the same bits as on the flat
            # fragment, without gathering it.
            for v, a, b in self._slices(f):
                work = v if v.dtype == self.master else v.to(self.master)
                self._merged(work, p.raw[a:b], old[a:b], new[a:b])
                if work is not v:
                    with torch.no_grad():
                        v.copy_(work)
        if new.data_ptr() != self.globals[f].data_ptr():
            with torch.no_grad():
                self.globals[f].copy_(new)
        self.pending.pop(f, None)

    def _merged(self, local: torch.Tensor, raw: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """`local` (changed in place) once the global value moved from `old`
        to `new`: with merge "rebase" new + (local now - local at the issue
        point), local at issue = old - raw, summed in apply()'s order so that
        taking an update from another member gives the same bits as applying
        it (local + ((raw - old) + new), as _prepare's delta); with "mix"
        alpha local + (1 - alpha) new."""
        with torch.no_grad():
            if self.merge == "rebase":
                return local.add_(raw.sub(old).add_(new))
            return local.mul_(self.alpha).add_(new, alpha=1.0 - self.alpha)

    def commit_round(self, alive: list[str]) -> None:
        """The round's samples are trained: the sampler moves past them, and
        those of members that died in the round are owed to the next."""
        plan = self.data_plan()
        dead = [r for r, m in enumerate(self.round_members) if m not in alive]
        self.owed = plan.owed_after(dead)
        self.sampler.load_state_dict(plan.after)

    def lost(self) -> None:
        """This generation's group failed: syncs on the wire are gone (they
        are issued again, from the held pseudo-gradients, on the next group)."""
        for p in self.pending.values():
            p.work, p.prepared = None, None
            token = getattr(p, "token", None)
            if token is not None:  # the outer thread drops it (its sums may never come)
                token.cancelled = True
                token.arrived.set()
        # An aborted all-reduce's buffer is not reused for the one issued again.
        for key in [k for k in self._bufs if k[1] == 1]:
            del self._bufs[key]
