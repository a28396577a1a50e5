"""`mccl elastic ...`: what an operator does to a job from the command line.

    mccl elastic serve  --port 29400                 the jobs' TCPStore (on the machine that stays on),
                                                     and the fleet's status page on --http-port (29480)
    mccl elastic status --store host:29400 --job vit its state, generation, members, waiting joiners
    mccl elastic create --store host:29400 --job vit let the first members found it
    mccl elastic end    --store host:29400 --job vit [--at-step S]
                                                     end it (at step S); a dormant job ends at once
    mccl elastic resume --store host:29400 --job vit [--checkpoint-dir DIR]
                                                     let members take up a stopped (or ended) job
                                                     from its checkpoint (DIR: when the store lost it)

`--store` takes what Job takes: host:port, tcp://host:port or etcd://h1:2379,...
Every command prints one line per fact and returns 0, or 1 with the reason
on stderr.
"""

from __future__ import annotations

import datetime
import sys
import time
import uuid

from . import decisions
from .membership import EPOCH_KEY, Membership
from .records import Cause, Generation
from .store import StoreAway, connect

_TIMEOUT = datetime.timedelta(seconds=10)


def _members(store: str, job: str) -> Membership:
    rs = connect(store, _TIMEOUT)
    rs.patience = 10.0  # an operator's command waits a little for a restarting store, not forever
    return Membership(rs, job)


def _fail(text: str) -> int:
    print(f"mccl elastic: {text}", file=sys.stderr)
    return 1


def serve(host: str, port: int, http_port: int | None = 29480, sample_s: float = 10.0) -> int:
    """Runs the jobs' TCPStore and, unless http_port is None, the fleet's
    status page on the same host (dashboard/server.py; 0: a free port). The
    page is never a reason for the store not to run: a port that cannot be
    bound, or a bad job secret setting, is reported and the store goes on
    without it."""
    import torch.distributed as dist
    store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=_TIMEOUT)
    # When the store began to hold keys: a process that finds no record of
    # its job on a young store gives living members time to write theirs back.
    store.set(EPOCH_KEY, repr(time.time()))
    print(f"mccl elastic: store listening on {host}:{store.port}; jobs connect with "
          f"--store <this machine's address>:{store.port} (Ctrl-C stops it)", flush=True)
    page = None
    if http_port is not None:
        try:
            from .dashboard.server import start
            page = start(host, store.port, host, http_port, every_s=sample_s)
            shown = "<this machine's address>" if host in ("0.0.0.0", "::", "") else host
            how = ("the operator's token is required (`mccl secret --token`)" if page.coord.access.required else
                   "open to anyone who reaches this port, as the store is: set MCCL_SECRET_FILE to require a token")
            print(f"mccl elastic: status page on http://{shown}:{page.port}/ (JSON /api/fleet, Prometheus "
                  f"/metrics); {how}", flush=True)
        except (OSError, ValueError) as e:
            print(f"mccl elastic: the status page is not served ({e}); the store runs without it "
                  f"(--http-port picks another port, --no-http turns it off)", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        if page is not None:
            page.close()


def state_of(rec: Generation | None) -> str:
    if rec is None:
        return "not started"
    return {Cause.DORMANT: "dormant", Cause.END: "finished", Cause.STOPPED: "stopped"}.get(rec.cause, "running")


def status(store: str, job: str) -> int:
    try:
        m = _members(store, job)
        n, rec = m.latest_generation()
        if rec is None:
            made = m.created()
            print(f"job {job!r}: {'created, ' if made else ''}no generation yet ({m.requests()} join requests)")
            return 0
        waiting = max(0, m.requests() - rec.admitted)
        print(f"job {job!r}: {state_of(rec)}, generation {n} ({rec.cause.value}), {len(rec.members)} members, "
              f"step {rec.step}; {waiting} joiners waiting")
        if rec.checkpoint:
            print(f"  checkpoint: {rec.checkpoint}")
        if rec.error:
            print(f"  stopped by: {decisions.describe_error(rec.error)}")
        for who, why in rec.refused.items():
            print(f"  refused {who}: {why}")
        for r, mid in enumerate(rec.members):
            print(f"  rank {r}: {mid}")
        end = m.end_request()
        if end is not None and rec.live:
            print(f"  asked to end {'at once' if end < 0 else f'at step {end}'}")
    except StoreAway as e:
        return _fail(str(e))
    return 0


def create(store: str, job: str) -> int:
    try:
        m = _members(store, job)
        n, rec = m.latest_generation()
        if rec is not None and rec.cause is Cause.END:
            return _fail(f"job {job!r} finished at step {rec.step}; name a new job, or `mccl elastic resume` it")
        if rec is not None:
            print(f"job {job!r} exists: {state_of(rec)}, generation {n}, step {rec.step}")
            return 0
        mark = m.create(uuid.uuid4().hex[:12])
        m.list_job()
        print(f"job {job!r} created (incarnation {mark['incarnation']}): its first members found it")
    except StoreAway as e:
        return _fail(str(e))
    return 0


def end(store: str, job: str, at_step: int | None) -> int:
    try:
        m = _members(store, job)
        n, rec = m.latest_generation()
        if rec is None:
            return _fail(f"job {job!r} has no generation in the store at {store}")
        if rec.cause is Cause.END:
            print(f"job {job!r} had finished at step {rec.step}")
            return 0
        if not rec.live:
            held = m.publish(n + 1, Generation(members=(), admitted=rec.admitted, cause=Cause.END, step=rec.step,
                                               incarnation=rec.incarnation, signature=rec.signature,
                                               checkpoint=rec.checkpoint))
            if held.cause is not Cause.END:
                return _fail(f"job {job!r} changed meanwhile ({held.cause.value}); run the command again")
            print(f"job {job!r} ({state_of(rec)}) ended at step {rec.step}")
            return 0
        m.request_end(at_step)
        print(f"job {job!r} asked to end {'at its next step boundary' if at_step is None else f'at step {at_step}'}")
    except StoreAway as e:
        return _fail(str(e))
    return 0


def resume(store: str, job: str, checkpoint_dir: str | None = None) -> int:
    try:
        m = _members(store, job)
        n, rec = m.latest_generation()
        if rec is None and checkpoint_dir:
            return _resume_from_folder(m, checkpoint_dir)
        if rec is None:
            return _fail(f"job {job!r} has no generation in the store at {store} (a store that restarted "
                         "without it: give --checkpoint-dir to resume from the job's checkpoint folder)")
        if rec.live:
            print(f"job {job!r} is running (generation {n}); nothing to resume")
            return 0
        if rec.cause is Cause.DORMANT:
            print(f"job {job!r} is dormant already: its next member resumes it")
            return 0
        if not rec.checkpoint:
            return _fail(f"job {job!r} ({state_of(rec)} at step {rec.step}) has no checkpoint to resume from")
        held = m.publish(n + 1, Generation(members=(), admitted=rec.admitted, cause=Cause.DORMANT, step=rec.step,
                                           incarnation=rec.incarnation, signature=rec.signature,
                                           checkpoint=rec.checkpoint))
        if held.cause is not Cause.DORMANT:
            return _fail(f"job {job!r} changed meanwhile ({held.cause.value}); run the command again")
        if m.end_request() is not None:
            m.store.delete_key(m.key("end"))
        print(f"job {job!r} is dormant at step {rec.step} (checkpoint {rec.checkpoint}): its next member resumes it")
    except StoreAway as e:
        return _fail(str(e))
    return 0


def _resume_from_folder(m: Membership, folder: str) -> int:
    """The store has no record of the job (it restarted while the job was
    dormant, stopped or ended): a dormant record naming the newest valid
    checkpoint in `folder`, so that the next member resumes from it."""
    from .keeping import newest_in
    ref = newest_in(folder, m.job)
    if ref is None:
        return _fail(f"{folder} holds no valid checkpoint of job {m.job!r}")
    n = max(m.latest(), ref.generation) + 1
    held = m.publish(n, Generation(members=(), admitted=0, cause=Cause.DORMANT, step=ref.step,
                                   incarnation=ref.incarnation, signature=ref.signature, checkpoint=ref.name))
    if held.cause is not Cause.DORMANT or held.checkpoint != ref.name:
        return _fail(f"job {m.job!r} changed meanwhile ({held.cause.value}); run the command again")
    print(f"job {m.job!r} is dormant at step {ref.step} (checkpoint {ref.name}, a {ref.kind or 'sharded'} one): "
          "its next member resumes it")
    return 0

