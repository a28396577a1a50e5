"""One member of `mccl-bench diloco`: an emulated large model (one flat
float32 parameter of --params-m million values) whose compute is a sleep of
--compute-ms per step (the host's cores stay free, as with the ViT
workload's emulation), trained either

- as an mccl.elastic job with a DiLoCoState (--mode diloco): the real outer
  loop, its syncs on the --wire group, --fragments streamed with the
  default overlap; an inner step changes a few values so that the
  pseudo-gradients are not zero; or
- as DDP would (--mode ddp): each step's gradient (the whole tensor)
  all-reduced in --bucket-mb buckets issued one after another as the
  emulated backward (the last 2/3 of the step) readies them, then waited
  for; a plain process group of the job's store, --rank given.

Rank 0 prints one line "RESULT {json}" with the wall time, the compute
slept, the time waiting for the network, the host's own work and per sync
its time on the wire.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time

import torch
import torch.distributed as dist


class Flat(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n))


def diloco(a) -> dict:
    import mccl.elastic as elastic
    net = Flat(int(a.params_m * 1e6))
    inner = torch.optim.SGD(net.parameters(), lr=0.1)  # no gradients: the emulated device's step
    outer = torch.optim.SGD(net.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    state = elastic.DiLoCoState(net, inner, outer, elastic.ElasticSampler(1 << 20, batch=1), H=a.H,
                                wire_dtype=a.wire, wire_reduce=a.wire_reduce, fragments=a.fragments,
                                overlap=None if a.overlap < 0 else a.overlap)
    job = elastic.Job(a.store, a.job, initial=a.world, create=True, timeout_s=600.0, initial_wait_s=120.0)
    slept = [0.0]
    # The window: from the start of round 2's first inner step to the start
    # of the last round's: rounds 2 .. R-1 whole, each with its outer syncs'
    # applications and its end (the boundary's all_reduce). The first round
    # warms the connections up, and its end absorbs the members' start skew
    # (reported as start_skew_s); the last one ends the job.
    first, last = a.H, (a.rounds - 1) * a.H
    marks: dict[int, tuple[float, float, float]] = {}  # inner step -> (wall, slept, CPU) at its start
    g = torch.Generator().manual_seed(0)
    bump = torch.randn(4096, generator=g) * 1e-3
    steps = a.rounds * a.H

    def train_step(model, idx):
        k = state.inner_clock  # this inner step's index (inner_clock counts those done)
        if k in (first, last):
            marks[k] = (time.perf_counter(), slept[0], time.process_time())
        t = time.perf_counter()
        time.sleep(a.compute_ms / 1000)
        slept[0] += time.perf_counter() - t
        with torch.no_grad():
            model.w[:4096].add_(bump)

    job.run(state, train_step, steps=steps)
    (t0, s0, c0), (t1, s1, c1) = marks[first], marks[last]
    syncs = [s for s in state.syncs if t0 < s["t"] <= t1]
    out = {"mode": "diloco", "world": job.world, "wall_s": t1 - t0, "compute_s": s1 - s0,
           "inner_steps": last - first, "wire": state.outer_wire, "fragments": a.fragments,
           "overlap": state.schedule.tau, "H": a.H, "waited_s": sum(s["waited_s"] for s in syncs),
           "host_s": sum(s["host_s"] for s in syncs), "issue_s": sum(s["issue_s"] for s in syncs),
           "syncs": len(syncs),
           "wire_s": [s["wire_s"] for s in syncs if s["wire_s"] is not None],
           "boundary_s": list(job.boundary_s)[1:a.rounds - 1], "start_skew_s": job.boundary_s[0],
           "cpu_s": c1 - c0}
    dist.destroy_process_group()
    return out


def ddp(a) -> dict:
    host, port = a.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=600))
    dist.init_process_group("mccl", store=dist.PrefixStore(f"{a.job}/ddp/", store), rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=600))
    group = None
    if a.wire != "fp32":
        from ..hooks import wire_group
        group = wire_group(a.wire, min_bytes=0)
    grad = torch.zeros(int(a.params_m * 1e6))
    buckets = list(torch.split(grad, max(1, int(a.bucket_mb * 2**20 / 4))))
    step_s, forward = a.compute_ms / 1000, a.compute_ms / 3000
    times, waits, slept = [], [], 0.0
    dist.barrier()
    for step in range(a.steps):
        t0 = time.perf_counter()
        time.sleep(forward)
        works = []
        for i, b in enumerate(buckets):
            # the emulated backward readies bucket i at forward + backward * (i + 1) / k
            due = t0 + forward + (step_s - forward) * (i + 1) / len(buckets)
            time.sleep(max(0.0, due - time.perf_counter()))
            works.append(dist.all_reduce(b, op=dist.ReduceOp.AVG, group=group, async_op=True))
        time.sleep(max(0.0, t0 + step_s - time.perf_counter()))
        slept += step_s
        tw = time.perf_counter()
        for w in works:
            w.wait()
        waits.append(time.perf_counter() - tw)
        times.append(time.perf_counter() - t0)
    warm = 1 if a.steps > 1 else 0
    out = {"mode": "ddp", "world": a.world, "wall_s": sum(times[warm:]), "compute_s": step_s * (a.steps - warm),
           "inner_steps": a.steps - warm, "waited_s": sum(waits[warm:]), "wire": a.wire, "host_s": 0.0,
           "step_s": times[warm:]}
    dist.destroy_process_group()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["diloco", "ddp"], required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--job", default="diloco-bench")
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank", type=int, default=0, help="--mode ddp: this member's rank")
    p.add_argument("--params-m", type=float, default=62.5)
    p.add_argument("--compute-ms", type=float, default=1000.0)
    p.add_argument("--wire", default="bf16")
    p.add_argument("--wire-reduce", default="auto", help="--mode diloco: DiLoCoState(wire_reduce=...)")
    p.add_argument("--H", type=int, default=50)
    p.add_argument("--fragments", type=int, default=5)
    p.add_argument("--overlap", type=int, default=-1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="--mode ddp")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    out = diloco(a) if a.mode == "diloco" else ddp(a)
    if out is not None and (a.mode == "ddp" and a.rank == 0 or a.mode == "diloco"):
        print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
