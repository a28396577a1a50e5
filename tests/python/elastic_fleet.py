"""Shared by the elastic tests: a store, a fleet of elastic_worker.py
processes (local, or one per host of a network lab), and the one-process
float64 replay that a job's parameters must equal."""

from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from mccl.elastic import ElasticSampler
from mccl.elastic.membership import EPOCH_KEY, Membership
from mccl.elastic.records import Cause, Generation
from mccl.elastic.store import connect
from mccl.launch import free_port

WORKERS = Path(__file__).parent / "workers"
if str(WORKERS) not in sys.path:
    sys.path.insert(0, str(WORKERS))


def _store():
    """A TCPStore that has been up for a while (its epoch an hour old): the
    founders need not wait the re-seed window of a store that may have just
    restarted empty (StoreServer tests that window)."""
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    master.set(EPOCH_KEY, repr(time.time() - 3600))
    return master, port


def _client(port):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))


def _members(port, job="test") -> Membership:
    return Membership(connect(f"127.0.0.1:{port}", datetime.timedelta(seconds=30)), job)


def _gen(members, admitted, cause="join", step=0) -> Generation:
    return Generation(members=tuple(members), admitted=admitted, cause=Cause(cause), step=step)


class Fleet:
    """Workers of one job: local processes, or worker i on host i of a
    network lab (the store then runs on host 0)."""

    def __init__(self, store: str, tmp: Path, lab=None, extra: list[str] | None = None,
                 script: str = "elastic_worker.py"):
        self.store, self.tmp, self.lab = store, tmp, lab
        self.script = script  # in workers/: elastic_worker.py, or diloco_worker.py
        self.extra = list(extra or [])
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.may_fail: set[int] = set()  # workers expected to exit with an error

    def start(self, initial: int = 1, extra: list[str] | None = None, create: bool | None = None,
              host: int | None = None) -> int:
        """Starts worker i (on lab host `host`, by default i); founders
        (initial > 1, or create) may found the job."""
        i = len(self.procs)
        host = i if host is None else host
        log = self.tmp / f"worker{i}.log"
        out = self.tmp / "final.pt"
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(WORKERS) + os.pathsep +
                   os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, str(WORKERS / self.script), "--store", self.store,
               "--initial", str(initial), "--out", str(out), *self.extra, *(extra or [])]
        if create or (create is None and initial > 1):
            cmd.append("--create")
        if self.lab is not None:
            cmd = self.lab.prefix(host) + cmd
            env.update(self.lab.rank_env(host))
        with open(log, "w") as f:
            self.procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))
        self.logs.append(log)
        return i

    def text(self, i: int) -> str:
        return self.logs[i].read_text()

    def commits(self) -> dict[int, set[int]]:
        """step -> the worlds logged for it (one each, if consistent)."""
        out: dict[int, set[int]] = {}
        for i in range(len(self.procs)):
            for m in re.finditer(r"COMMIT (\d+) world (\d+)", self.text(i)):
                out.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
        return out

    def wait_for(self, what, cond, timeout: float = 90.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            for i, p in enumerate(self.procs):
                if p.poll() not in (None, 0, -signal.SIGKILL) and i not in self.may_fail:
                    # Every worker's tail: why the others did what they did
                    # (a joiner that was never admitted is the members' story).
                    others = "\n".join(f"--- worker {j} (exit {q.poll()})\n{self.text(j)[-2500:]}"
                                        for j, q in enumerate(self.procs) if j != i)
                    raise AssertionError(f"worker {i} exited {p.returncode} waiting for {what}:\n"
                                         f"{self.text(i)[-4000:]}\nthe other workers:\n{others}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; logs:\n" +
                             "\n".join(f"--- {i}\n{self.text(i)[-2500:]}" for i in range(len(self.procs))))

    def assert_ok(self, which: list[int]) -> None:
        bad = [i for i in which if self.procs[i].returncode != 0 or "WORKER OK" not in self.text(i)]
        assert not bad, "\n".join(f"--- worker {i} (exit {p.returncode})\n{self.text(i)[-3000:]}"
                                   for i, p in enumerate(self.procs))

    def last_gen_worlds(self) -> dict[int, set[int]]:
        """step -> the worlds logged for it in the newest generation that
        committed it (a step redone after a roll-back counts there)."""
        best: dict[int, tuple[int, set[int]]] = {}
        for i in range(len(self.procs)):
            for mt in re.finditer(r"COMMIT (\d+) world (\d+) rank \d+ gen (\d+)", self.text(i)):
                s, world, gen = (int(g) for g in mt.groups())
                g0, ws = best.get(s, (-1, set()))
                if gen > g0:
                    best[s] = (gen, {world})
                elif gen == g0:
                    ws.add(world)
        return {s: ws for s, (_, ws) in best.items()}

    def commit_times(self, step: int) -> list[float]:
        """Wall times at which members logged committing `step`."""
        return [float(m.group(1)) for i in range(len(self.procs))
                for m in re.finditer(rf"COMMIT {step} world \d+ rank \d+ gen \d+ t (\S+)", self.text(i))]

    def latest_world(self) -> int:
        c = self.commits()
        return max(c[max(c)]) if c else 0

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


def replay(worlds: dict[int, int], steps: int, momentum: float = 0.0, skipped: frozenset = frozenset(),
           weighted: bool = False, global_batch: int = 0) -> dict:
    """The job in one process: step s averages the gradients of worlds[s]
    members, each on its share of the sampler's indices (without the
    `skipped` samples, as a member that found them unreadable does).
    `weighted` (Job(shares="speed")): the gradient of the mean over all the
    step's samples, whoever trained them (with `global_batch`, as many
    samples as its micro-batches take)."""
    import elastic_worker as w

    net = w.model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=momentum)
    sampler = ElasticSampler(w.DATA, batch=w.BATCH, seed=w.SEED)
    for s in range(steps):
        world = worlds[s]
        micro = max(1, -(-global_batch // (w.BATCH * world))) if global_batch else 1
        if weighted:
            net.zero_grad()
            w.loss_of(net, [i for r in range(world) for i in sampler.indices(r, world, micro)
                            if i not in skipped]).backward()
        else:
            grads = [torch.zeros_like(p) for p in net.parameters()]
            for r in range(world):
                net.zero_grad()
                w.loss_of(net, [i for i in sampler.indices(r, world) if i not in skipped]).backward()
                for g, p in zip(grads, net.parameters()):
                    g += p.grad / world
            for g, p in zip(grads, net.parameters()):
                p.grad = g
        opt.step()
        sampler.advance(world, micro)
    return net.state_dict()


def final_step(fleet: Fleet, which: list[int], stop: int) -> int:
    """The step the job ended at: every one of `which` says the same
    ("DONE step N"), and it is `stop` or later (an end asked for a step the
    job had passed by the time rank 0 read the request ends at the next)."""
    done = {int(m.group(1)) for i in which for m in re.finditer(r"DONE step (\d+)", fleet.text(i))}
    assert len(done) == 1, f"members ended at different steps: {done}"
    final = done.pop()
    assert final >= stop, f"the job ended at step {final}, before the {stop} asked for"
    return final


def ends_as_replayed(fleet: Fleet, tmp_path: Path, survivors: list[int], stop: int,
                     momentum: float = 0.0, weighted: bool = False, global_batch: int = 0) -> dict[int, int]:
    """The survivors end at `stop` or soon after (the driver has asked for
    it): every step is logged once, with one world, and the final parameters
    equal the replay of those worlds. Returns the worlds."""
    fleet.wait_for("the end", lambda: all(fleet.procs[i].poll() is not None for i in survivors), 120)
    fleet.assert_ok(survivors)
    final = final_step(fleet, survivors, stop)
    commits = fleet.commits()
    assert sorted(commits) == list(range(final)), "a step is missing from the logs"
    for s, ws in commits.items():
        assert len(ws) == 1, f"members disagree on step {s}'s world: {ws}"
    worlds = {s: ws.pop() for s, ws in commits.items()}
    got = torch.load(tmp_path / "final.pt")
    want = replay(worlds, final, momentum=momentum, weighted=weighted, global_batch=global_batch)
    for k in want:
        assert torch.allclose(got[k], want[k], rtol=1e-10, atol=1e-12), (k, (got[k] - want[k]).abs().max())
    return worlds




class StoreServer:
    """`mccl elastic serve` in a process of its own, to kill and start again
    on the same port (a coordinator's reboot)."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, prefix: list[str] | None = None):
        self.host, self.port = host, port or free_port()
        self.prefix = list(prefix or [])
        self.proc: subprocess.Popen | None = None
        self.address = f"{self.host}:{self.port}"

    def start(self) -> "StoreServer":
        self.proc = subprocess.Popen(self.prefix + [sys.executable, "-m", "mccl.cli", "elastic", "serve",
                                                    "--host", self.host, "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        seen = []
        end = time.monotonic() + 60
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "listening" in line:
                return self
        self.kill()
        raise AssertionError(f"mccl elastic serve did not start: {''.join(seen)[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


# ---------------------------------------------------------------- DiLoCo
def diloco_log(fleet: Fleet) -> dict:
    """What diloco_worker.py logged, from every worker: rounds (index ->
    (start, member ids)), applications ((round, fragment) -> (point, count,
    alive ids); every member that applied one logs the same) and inner steps
    ((round, member id) -> [(epoch, index), ...] in step order)."""
    rounds, outer, inner = {}, {}, {}
    for i in range(len(fleet.procs)):
        for line in fleet.text(i).splitlines():
            f = line.split(" ")
            if f[0] == "ROUND":
                got = (int(f[2]), tuple(f[3].split(",")))
                assert rounds.setdefault(int(f[1]), got) == got, f"round {f[1]}: {rounds[int(f[1])]} and {got}"
            elif f[0] == "OUTER":
                got = (int(f[3]), int(f[4]), tuple(f[5].split(",")))
                key = (int(f[1]), int(f[2]))
                assert outer.setdefault(key, got) == got, f"application {key}: {outer[key]} and {got}"
            elif f[0] == "INNER":
                pairs = [tuple(int(x) for x in p.split(":")) for p in f[4].split(",")] if len(f) > 4 else []
                inner.setdefault((int(f[1]), f[3]), []).append((int(f[2]), pairs))
    return {"rounds": rounds, "outer": outer, "inner": inner}


def replay_diloco(log: dict, H: int, fragments: int = 1, overlap: int | None = None, merge: str = "rebase",
                  alpha: float = 0.5) -> list[torch.Tensor]:
    """The DiLoCo job in one process, in float64, member by member: each
    member's local model and inner optimizer (a joiner's fresh), its
    pseudo-gradient per fragment at the issue points, the sum over the
    members alive at each logged application that trained since their last
    issue, the outer Nesterov step, the merge; the round's data from
    RoundPlan with the samples of members dead in a round owed to the next.
    Written apart from DiLoCoState's code. Returns the global fragments."""
    import diloco_worker as dw
    import elastic_worker as w
    from mccl.elastic.diloco_plan import RoundPlan, Schedule, split

    sched = Schedule(H, fragments, overlap)
    tau = sched.tau
    base = w.model()
    pieces = split([p.numel() for p in base.parameters()], fragments)

    def flat(net, f):
        ps = list(net.parameters())
        return torch.cat([ps[i].detach().reshape(-1)[a:b] for i, a, b in pieces[f]])

    def put(net, f, x):
        ps, off = list(net.parameters()), 0
        with torch.no_grad():
            for i, a, b in pieces[f]:
                ps[i].view(-1)[a:b].copy_(x[off:off + b - a])
                off += b - a

    G = [torch.nn.Parameter(flat(base, f).clone(), requires_grad=False) for f in range(fragments)]
    outer = torch.optim.SGD(G, lr=dw.OUTER_LR, momentum=dw.OUTER_MOMENTUM, nesterov=True)
    members: dict[str, dict] = {}
    sampler, owed = ElasticSampler(w.DATA, batch=w.BATCH, seed=w.SEED), []
    for R in sorted(log["rounds"]):
        _, ids = log["rounds"][R]
        for m in list(members):
            if m not in ids:
                del members[m]  # left or died at the last round's end
        for m in ids:
            if m not in members:
                net = w.model()
                for f in range(fragments):
                    put(net, f, G[f].detach())
                members[m] = {"net": net, "since": [0] * fragments, "raw": {},
                              "opt": torch.optim.SGD(net.parameters(), lr=dw.INNER_LR, momentum=dw.INNER_MOMENTUM)}
        plan = RoundPlan(sampler, owed, len(ids), H)
        for j in range(H + 1):
            for kind, f in sched.events(j):
                if kind == "issue":
                    for mm in members.values():
                        mm["raw"][f] = (G[f].detach() - flat(mm["net"], f)) if mm["since"][f] else None
                        mm["since"][f] = 0
                    continue
                point, count, alive = log["outer"][(R, f)]
                assert point == j, (R, f, point, j)
                for m in list(members):
                    if m not in alive:
                        del members[m]  # died in this round
                raws = [mm["raw"][f] for mm in members.values() if mm["raw"][f] is not None]
                assert len(raws) == count, f"round {R} fragment {f}: {len(raws)} contributions, {count} logged"
                old = G[f].detach().clone()
                if raws:
                    G[f].grad = sum(raws) / len(raws)
                    outer.step()
                    G[f].grad = None
                for mm in members.values():
                    now, raw = flat(mm["net"], f), mm["raw"][f]
                    if tau == 0:
                        new = G[f].detach().clone()
                    elif merge == "rebase":
                        new = G[f].detach() + now - (old - (raw if raw is not None else 0.0))
                    else:
                        new = alpha * now + (1 - alpha) * G[f].detach()
                    put(mm["net"], f, new)
                if sched.applies[f] == H:
                    dead = [r for r, m in enumerate(ids) if m not in alive]
                    owed = plan.owed_after(dead)
                    sampler.load_state_dict(plan.after)
            if j == H:
                break
            for r, m in enumerate(ids):
                mm = members.get(m)
                if mm is None:
                    continue
                mm["opt"].zero_grad()
                w.loss_of(mm["net"], plan.slot(j, r)).backward()
                mm["opt"].step()
                mm["since"] = [s + 1 for s in mm["since"]]
    return [g.detach() for g in G]
