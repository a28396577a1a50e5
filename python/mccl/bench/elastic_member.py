"""One member of the `mccl-bench elastic` job: a model of --params-mb MB of
float32 weights (SGD with momentum, so the live state is twice that),
emulated device time per step (sleep, host cores stay free), and one JSON
line per event on stdout for the orchestrator:

    {"ev": "commit", "step": 12, "world": 4, "rank": 0, "t": <wall clock>}
    {"ev": "change", "gen": 3, "cause": "join", "world": 5, "stall_s": ..., "bytes": ...}
    {"ev": "done", "boundary_s": [...], "state_bytes": ...}

It stops at the step the orchestrator asks the job to end at (KeySetter.end,
as `mccl elastic end --at-step` does)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import torch

import mccl.elastic as elastic


# mccl.elastic's lines with the wall time (ms): a member's log reads as a
# timeline beside its events' "t".
logging.basicConfig(format="%(asctime)s.%(msecs)03d %(levelname)s %(message)s", datefmt="%H:%M:%S",
                    level=logging.WARNING)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--job", default="bench")
    p.add_argument("--initial", type=int, default=1)
    p.add_argument("--create", action="store_true", help="this member may found the job")
    p.add_argument("--checkpoint-dir", default="", help="the job's checkpoint folder (dormancy, resume)")
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--checkpoint-every-s", type=float, default=300.0,
                   help="with --checkpoint-dir: rank 0's background saves (their stalls are in the done event)")
    p.add_argument("--params-mb", type=float, default=64.0)
    p.add_argument("--step-ms", type=float, default=300.0)
    p.add_argument("--crash-grace-s", type=float, default=1.0)
    p.add_argument("--ask-when", default="",
                   help="start up, say so (event armed), and ask to join only once this file exists")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    width = 1024
    layers = max(1, round(a.params_mb * 2**20 / 4 / (width * width)))
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    opt = torch.optim.SGD(net.parameters(), lr=1e-4, momentum=0.9)
    data = 1 << 20
    state = elastic.State(net, opt, elastic.ElasticSampler(data, batch=1, seed=0))
    if a.ask_when:
        emit(ev="armed", t=time.time())
        while not os.path.exists(a.ask_when):
            time.sleep(0.01)
    job = elastic.Job(a.store, a.job, initial=a.initial, crash_grace_s=a.crash_grace_s, timeout_s=a.timeout_s,
                      create=a.initial > 1 or a.create, checkpoint_dir=a.checkpoint_dir or None,
                      checkpoint_every_s=a.checkpoint_every_s)
    job.leave_on_signals()
    x = torch.randn(1, width)

    def train_step(model, idx):
        time.sleep(a.step_ms / 1000)
        loss = model(x).square().mean()
        loss.backward()
        return loss

    def on_step(job, state, loss):
        emit(ev="commit", step=state.step - 1, world=job.world, rank=job.rank, t=time.time())

    seen = [0, False]

    def flush():
        for c in job.history[seen[0]:]:
            emit(ev="change", gen=c.generation, cause=c.cause, world=c.world, stall_s=c.stall_s,
                 bytes=c.state_bytes, left=c.left, joined=c.joined, parts=c.parts, t=time.time())
        seen[0] = len(job.history)

    def on_change(job, state, loss):
        if not seen[1] and job.ready_s is not None:
            emit(ev="ready", ready_s=job.ready_s, step=state.step - 1, t=time.time())
            seen[1] = True
        on_step(job, state, loss)
        flush()  # changes made at the boundary before this step

    try:
        if job.run(state, train_step, steps=10**9, on_step=on_change) == "left":
            emit(ev="left", t=time.time())
            return 0
    except elastic.Excluded:
        emit(ev="excluded", t=time.time())
        return 3
    flush()
    emit(ev="done", boundary_s=list(job.boundary_s), state_bytes=state.nbytes(), rank=job.rank,
         save_stalls_s=list(getattr(job._durable, "stalls", [])))
    import torch.distributed as dist
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
