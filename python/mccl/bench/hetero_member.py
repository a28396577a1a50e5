"""One member of the `mccl-bench hetero` job: an emulated device of relative
speed --speed (a sleep of --sample-ms / speed per sample, so that the
host's cores stay free), a model of --params-mb MB of float32 weights whose
gradient DDP all-reduces, SGD. One JSON line per event on stdout:

    {"ev": "commit", "step": 12, "world": 4, "rank": 0, "share": 64, "total": 256, "t": <wall clock>}
    {"ev": "solo", "samples_per_s": ...}          # --solo-steps: alone, no job, no network
    {"ev": "done", "boundary_s": [...]}

From step --slow-at-step on it is --slow-factor times slower (its person
started working on it). It stops at the step the orchestrator asks the job
to end at (KeySetter.end)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import mccl.elastic as elastic


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", default="")
    p.add_argument("--job", default="hetero")
    p.add_argument("--initial", type=int, default=1)
    p.add_argument("--shares", choices=["equal", "speed"], default="speed")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--sample-ms", type=float, default=10.0, help="emulated device time per sample at speed 1")
    p.add_argument("--batch", type=int, default=64, help="the sampler's batch: samples per member per step")
    p.add_argument("--params-mb", type=float, default=1.0)
    p.add_argument("--slow-at-step", type=int, default=-1)
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--solo-steps", type=int, default=0, help="train this many steps alone and report samples/s")
    p.add_argument("--timeout-s", type=float, default=120.0)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    width = 512
    layers = max(1, round(a.params_mb * 2**20 / 4 / (width * width)))
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    x = torch.randn(max(a.batch, 1) * 8, width)
    speed = [a.speed]

    def train_step(model, idx):
        time.sleep(len(idx) * a.sample_ms / 1000 / speed[0])
        loss = model(x[:len(idx)]).square().mean()
        loss.backward()
        return loss

    if a.solo_steps:
        train_step(net, list(range(a.batch)))  # warm-up
        opt.step()
        opt.zero_grad()
        t0 = time.perf_counter()
        for _ in range(a.solo_steps):
            train_step(net, list(range(a.batch)))
            opt.step()
            opt.zero_grad()
        emit(ev="solo", samples_per_s=a.solo_steps * a.batch / (time.perf_counter() - t0), speed=a.speed)
        return 0

    state = elastic.State(net, opt, elastic.ElasticSampler(1 << 24, batch=a.batch, seed=0))
    job = elastic.Job(a.store, a.job, initial=a.initial, timeout_s=a.timeout_s, create=True, shares=a.shares,
                      initial_wait_s=60.0)
    job.leave_on_signals()

    def on_step(job, state, loss):
        counts = job._counts
        emit(ev="commit", step=state.step - 1, world=job.world, rank=job.rank, t=time.time(),
             share=counts[job.rank] if counts else a.batch, total=sum(counts) if counts else a.batch * job.world)
        if state.step == a.slow_at_step:
            speed[0] /= a.slow_factor

    job.run(state, train_step, steps=10**9, on_step=on_step)
    emit(ev="done", boundary_s=list(job.boundary_s), rank=job.rank)
    import torch.distributed as dist
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
