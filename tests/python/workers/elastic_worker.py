"""One member of an elastic job (tests/python/test_elastic.py drives it).

A float64 MLP on a seeded synthetic dataset, SGD; every committed step is
logged as "COMMIT <step> world <w> rank <r> gen <g>" so the test can replay
the job's membership in one process. The job ends at the step the driver
asks for (Membership.request_end, as `mccl elastic end --at-step` does).
Exit codes: 0 done or left, 3 excluded, 4 the job stopped (JobStopped),
5 refused, 6 the job had finished, 7 no such job (JobMissing)."""

import argparse
import logging
import os
import signal
import sys
import time

import torch

import mccl.elastic as elastic

DATA, FEATURES, BATCH, SEED = 97, 6, 4, 1234
MOMENTUM = 0.5  # FSDP runs: the optimizer has state to reshard
SLEEP_S = 0.0  # per step: the driver needs steps slow enough to act between
SAMPLE_S = 0.0  # per sample, divided by SPEED: an emulated device of this member's speed
SPEED = 1.0


def dataset():
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(DATA, FEATURES, generator=g, dtype=torch.float64)
    w = torch.randn(FEATURES, 1, generator=g, dtype=torch.float64)
    return x, x @ w + 0.1 * torch.randn(DATA, 1, generator=g, dtype=torch.float64)


def model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


X, Y = dataset()
# mccl.elastic's lines with the wall time (ms), so a test's failure reads as a
# timeline beside the COMMIT lines' "t".
logging.basicConfig(format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s", datefmt="%H:%M:%S",
                    level=logging.WARNING)


def loss_of(net, idx):
    dtype = next(net.parameters()).dtype  # float64, unless a test makes a member odd (--float32)
    if not idx:  # the epoch's last step may leave a member nothing
        return net(X[:0].to(dtype)).sum() * 0.0
    return torch.nn.functional.mse_loss(net(X[idx].to(dtype)), Y[idx].to(dtype))


def train_step(net, idx):
    time.sleep(SLEEP_S + len(idx) * SAMPLE_S / SPEED)
    loss = loss_of(net, idx)
    loss.backward()
    return loss


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--job", default="test")
    p.add_argument("--initial", type=int, default=1)
    p.add_argument("--create", action="store_true", help="this member may found the job")
    p.add_argument("--checkpoint-dir", default="", help="the job's checkpoint folder (dormancy, resume)")
    p.add_argument("--checkpoint-every-s", type=float, default=300.0)
    p.add_argument("--steps", type=int, default=10**9)
    p.add_argument("--float32", action="store_true", help="a float32 model where the job's is float64")
    p.add_argument("--freeze-first", action="store_true", help="the first layer frozen (another trainable set)")
    p.add_argument("--poison", type=int, default=-1, help="train_step raises ValueError for this sample")
    p.add_argument("--unreadable", type=int, default=-1, help="train_step raises Unreadable for this sample")
    p.add_argument("--no-admission-check", action="store_true",
                   help="no model signature (a mismatched joiner is admitted: its first collective fails)")
    p.add_argument("--sleep-ms", type=float, default=20.0)
    p.add_argument("--shares", choices=["equal", "speed"], default="equal")
    p.add_argument("--sample-ms", type=float, default=0.0, help="emulated compute per sample (divided by --speed)")
    p.add_argument("--speed", type=float, default=1.0, help="this member's relative speed")
    p.add_argument("--slow-at-step", type=int, default=-1, help="from this step on, --slow-factor times slower")
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--straggler", default="", help="MAX_SLOWDOWN,PATIENCE_STEPS: a StragglerPolicy")
    p.add_argument("--global-batch", type=int, default=0)
    p.add_argument("--out", default="")
    p.add_argument("--fsdp", default="", help="FSDP2 (ShardedState), checkpoints in this folder")
    p.add_argument("--checkpoint-every", type=int, default=4)
    p.add_argument("--die-in-state-sync", choices=["start", "midway"], default="",
                   help="a member handing the state to joiners: kill this process as the handover starts, or "
                        "(as its sender) once the first piece of the state is on its way")
    p.add_argument("--die-before-group", action="store_true",
                   help="kill this process in the first join's new generation, after it met the others and "
                        "before its process group publishes its address")
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--initial-wait-s", type=float, default=10.0, help="how long founders wait for --initial")
    p.add_argument("--die-at-open", action="store_true",
                   help="as rank 0 of the first join's new generation: die once every member came to its "
                        "rendezvous, before opening it (after it wrote the join generation)")
    p.add_argument("--die-when-admitted", action="store_true",
                   help="a joiner: die the moment a generation admits it, before its rendezvous")
    p.add_argument("--ask-when", default="",
                   help="start up, print ARMED, and ask to join only once this file exists (a join at a chosen "
                        "moment, its process start left out)")
    p.add_argument("--exit-delay-s", type=float, default=0.0,
                   help="after leaving, wait this long before exiting (a slow exit, as a busy Mac's)")
    p.add_argument("--hang-when-admitted", action="store_true",
                   help="a joiner: stop the moment a generation admits it, alive (its beacon answers) but never "
                        "coming to its rendezvous")
    p.add_argument("--die-in-first-rebuild", action="store_true",
                   help="FSDP: kill this process as the first generation builds its sharded state")
    p.add_argument("--in-join-barrier", choices=["die", "skip"], default="",
                   help="at the first join: die in the old group's barrier, or skip it (as if this member "
                        "had passed it before another one's failure made it fail for the rest)")
    p.add_argument("--fail-after-leave-barrier", action="store_true",
                   help="when this member leaves: pass the old group's last barrier with the others and, once "
                        "they have written the next generation, fail as if that barrier had failed here")
    a = p.parse_args()
    torch.set_num_threads(1)
    SLEEP_S = a.sleep_ms / 1000
    SAMPLE_S, SPEED = a.sample_ms / 1000, a.speed
    sampler = elastic.ElasticSampler(DATA, batch=BATCH, seed=SEED)
    if a.float32:
        base_model = model
        model = lambda: base_model().float()  # noqa: E731
    if a.freeze_first:
        base_model2 = model

        def model():
            net = base_model2()
            net[0].weight.requires_grad_(False)
            return net
    if a.poison >= 0 or a.unreadable >= 0:
        plain_step = train_step

        def train_step(net, idx):
            if a.poison in idx:
                raise ValueError(f"sample {a.poison} cannot be decoded")
            if a.unreadable in idx:
                raise elastic.Unreadable([a.unreadable], "a truncated file")
            return plain_step(net, idx)
    if a.fsdp:
        state = elastic.ShardedState(model, lambda params: torch.optim.SGD(params, lr=0.05, momentum=MOMENTUM), sampler,
                                     checkpoint_dir=a.fsdp, checkpoint_every=a.checkpoint_every)
    else:
        net = model()
        state = elastic.State(net, torch.optim.SGD(net.parameters(), lr=0.05), sampler)
    if a.ask_when:
        print("ARMED", flush=True)
        while not os.path.exists(a.ask_when):
            time.sleep(0.01)
    # A survivor slower than the grace to check in after a failure is taken
    # for dead (by design); CI's 2 cores can be that slow, so a wide grace.
    job = elastic.Job(a.store, a.job, initial=a.initial, initial_wait_s=a.initial_wait_s, crash_grace_s=3.0,
                      timeout_s=a.timeout_s, create=a.create,
                      checkpoint_dir=a.checkpoint_dir or None, checkpoint_every_s=a.checkpoint_every_s,
                      shares=a.shares, global_batch=a.global_batch or None,
                      straggler=elastic.StragglerPolicy(float(a.straggler.split(",")[0]),
                                                        int(a.straggler.split(",")[1])) if a.straggler else None)
    job.leave_on_signals()
    if a.no_admission_check:
        import mccl.elastic.signature as signature
        signature.of_state = lambda state: []
    if a.die_in_first_rebuild:
        def dying_rebuild(full):
            print("DYING in the first rebuild", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        state.rebuild = dying_rebuild
    if a.die_before_group:
        meet = job._meet_rank0

        def dying_meet(n, rank, world, after):
            meet(n, rank, world, after)
            if after is not None:  # generation n comes from a join at generation `after`'s boundary
                print("DYING before the group", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        job._meet_rank0 = dying_meet
    if a.die_at_open:
        meet_open = job._meet_rank0

        def dying_at_open(n, rank, world, after):
            if after is not None and rank == 0:
                here = [f"pg/{n}/here/{r}" for r in range(1, world)]
                while not job.members.has_all(here):
                    time.sleep(0.005)
                print("DYING at the open", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return meet_open(n, rank, world, after)
        job._meet_rank0 = dying_at_open
    if a.die_when_admitted:
        init_group = job._init_group

        def dying_admitted(n, rec, after=None):
            print("DYING when admitted", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        job._init_group = dying_admitted
        del init_group
    if a.hang_when_admitted:
        def hanging_admitted(n, rec, after=None):
            print("HANGING when admitted", flush=True)
            while True:
                time.sleep(60)
        job._init_group = hanging_admitted
    if a.die_in_state_sync:
        # A member handing the live state to a join's new generation (in
        # _change; not a recovery's handover, not a newcomer's first state).
        from mccl.elastic import state as state_mod
        change, deliver, relay, handing = job._change, job._deliver, state_mod._relay, [False]

        def changing(*args, **kw):
            handing[0] = True
            try:
                return change(*args, **kw)
            finally:
                handing[0] = False

        def dying(state, holds):
            if handing[0] and holds and a.die_in_state_sync == "start":
                print("DYING in the state sync", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return deliver(state, holds)

        def dying_sender(parts, prev, nxt, group, piece):
            if handing[0] and prev is None and nxt is not None:
                real_isend = torch.distributed.isend

                def isend(tensor, dst=None, group=None, **kw):
                    real_isend(tensor, dst=dst, group=group, **kw).wait()  # the first piece is on its way
                    print("DYING in the state sync", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                torch.distributed.isend = isend
            return relay(parts, prev, nxt, group, piece)
        job._change, job._deliver = changing, dying
        if a.die_in_state_sync == "midway":
            state_mod.CHAIN_PIECE_BYTES = 64  # sent with the state: the whole chain cuts it so
            state_mod._relay = dying_sender

    if a.in_join_barrier:
        change = job._change

        def first_join(state, leavers, joiners):
            real = torch.distributed.barrier

            def barrier(*args, **kw):
                if a.in_join_barrier == "die":
                    print("DYING in the join barrier", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                print("SKIPPING the join barrier", flush=True)
            if joiners:
                torch.distributed.barrier = barrier
                job._change = change  # once
            try:
                return change(state, leavers, joiners)
            finally:
                torch.distributed.barrier = real
        job._change = first_join

    if a.fail_after_leave_barrier:
        change = job._change

        def leave(state, leavers, joiners):
            real = torch.distributed.barrier

            def barrier(*args, **kw):
                real(*args, **kw)
                # Fail once the others went on: their leave record is out
                # (they write it right after the barrier).
                end = time.monotonic() + 30
                while not job.members.has(f"g/{job.generation + 1}") and time.monotonic() < end:
                    time.sleep(0.01)
                print("FAILING after the leave barrier", flush=True)
                raise torch.distributed.DistBackendError(
                    f"mccl rank {job.rank}/{job.world}: injected failure after the leave barrier")
            if job.rank in leavers:
                torch.distributed.barrier = barrier
            try:
                return change(state, leavers, joiners)
            finally:
                torch.distributed.barrier = real
        job._change = leave

    def on_step(job, state, loss):
        global SPEED
        print(f"COMMIT {state.step - 1} world {job.world} rank {job.rank} gen {job.generation} t {time.time():.3f}",
              flush=True)
        if job._counts is not None:
            print(f"SHARES {state.step - 1} {job._counts} rank {job.rank} speed {SPEED:g}", flush=True)
        if state.step == a.slow_at_step:
            SPEED /= a.slow_factor

    try:
        if job.run(state, train_step, steps=a.steps, on_step=on_step) == "left":
            print("LEFT", flush=True)
            import gc
            print(f"FROZEN {gc.get_freeze_count()}", flush=True)  # the exit skips these (Job.run)
            time.sleep(a.exit_delay_s)
            print("WORKER OK", flush=True)
            sys.exit(0)
    except elastic.Excluded as e:
        print(f"EXCLUDED {e}", flush=True)
        sys.exit(3)
    except elastic.JobStopped as e:
        print(f"STOPPED {e}", flush=True)
        sys.exit(4)
    except elastic.Refused as e:
        print(f"REFUSED {e}", flush=True)
        sys.exit(5)
    except elastic.JobFinished as e:
        print(f"FINISHED {e}", flush=True)
        sys.exit(6)
    except elastic.JobMissing as e:
        print(f"MISSING {e}", flush=True)
        sys.exit(7)
    print(f"DONE step {state.step} skipped {sorted(job.skipped)}", flush=True)
    for c in job.history:
        print(f"CHANGE gen {c.generation} {c.cause} world {c.world} stall {c.stall_s:.3f} "
              f"bytes {c.state_bytes}", flush=True)
    if a.fsdp:
        full = state.gather(dst=0)  # every rank takes part
        final = full["model"] if full is not None else None
    else:
        final = {k: v.clone() for k, v in state.model.state_dict().items()}
        import hashlib
        print("PARAMHASH " + hashlib.sha256(b"".join(v.numpy().tobytes() for v in final.values())).hexdigest(),
              flush=True)
    if job.rank == 0 and a.out:  # the group stays up after run() returns "done"
        torch.save(final, a.out)
    import torch.distributed as dist
    dist.destroy_process_group()
    print("WORKER OK", flush=True)
