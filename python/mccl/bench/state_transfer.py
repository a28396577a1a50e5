"""An elastic job's state handed to the ranks that lack it (joiners), three ways.

The state is a model of --params-mb float32 parameters with SGD momentum
(about twice those bytes), as in `mccl-bench elastic`. The last --receivers
ranks lack it; the others hold it. Each way runs --repeats times; the figure
is the slowest rank's time, median over the repeats:

- deliver: `mccl.elastic.state.deliver_state`, what a job uses: rank 0 sends
  along a chain through the receivers, the other holders take no part;
- broadcast: `broadcast_state` from rank 0 through every rank of the group
  (what jobs used before; the holders only relay);
- sends: rank 0 sends the same bytes to each receiver in turn, one plain
  `send` each (for one receiver, the link's floor for these bytes).
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist

from ..elastic import ElasticSampler, State
from ..elastic.state import broadcast_state, deliver_state, tensor_bytes
from .common import metadata, write_json


def _state(params_mb: float, holds: bool) -> State:
    n = max(1, int(params_mb * (1 << 20) / 4))
    net = torch.nn.Linear(1, 1, bias=False)
    net.weight = torch.nn.Parameter(torch.zeros(n, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    if holds:
        net.weight.grad = torch.ones_like(net.weight)
        opt.step()  # the momentum buffer exists: the job's state
    return State(net, opt, ElasticSampler(1000, batch=4))


def _timed(fn) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    return float(dt)


def run(args) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    k = args.receivers
    if not 1 <= k < world:
        raise SystemExit(f"mccl-bench state: --receivers must be 1..{world - 1} for {world} ranks, got {k}")
    holds = rank < world - k
    ref = _state(args.params_mb, True)
    nbytes = tensor_bytes(ref.state_dict())
    flat = torch.zeros(nbytes // 4)

    def fresh():
        return ref if holds else _state(args.params_mb, False)

    def sends():
        if rank == 0:
            for r in range(world - k, world):
                dist.send(flat, r)
        elif not holds:
            dist.recv(flat, 0)

    ways = {
        "deliver": lambda st: deliver_state(st, holds),
        "broadcast": lambda st: broadcast_state(st, 0, load=not holds),
        "sends": lambda st: sends(),
    }
    times: dict[str, list[float]] = {w: [] for w in ways}
    for _ in range(args.repeats):
        for name, way in ways.items():
            st = fresh()
            times[name].append(_timed(lambda: way(st)))
    if rank != 0:
        return
    med = {w: statistics.median(v) for w, v in times.items()}
    print(f"# {world} ranks, {k} receiver(s), state {nbytes / 1e6:.1f} MB, median of {args.repeats}", flush=True)
    print(f"{'way':10s} {'median':>9s} {'range':>17s} {'MB/s per receiver':>18s}")
    for w, v in times.items():
        print(f"{w:10s} {med[w]:8.3f}s {min(v):7.3f}-{max(v):.3f} s {nbytes / 1e6 / med[w]:18.1f}")
    goodput = os.environ.get("MCCL_BENCH_GOODPUT_GBPS")  # the lab's iperf3 goodput per link (GB/s)
    if goodput:
        print(f"# the lab's TCP goodput {float(goodput) * 1e3:.1f} MB/s per link (iperf3): these bytes in "
              f"{nbytes / (float(goodput) * 1e9):.3f} s", flush=True)
    if args.json:
        write_json(args.json, metadata({"world": world, "receivers": k, "state_bytes": nbytes,
                                        "repeats": args.repeats, "goodput_GBps": goodput}),
                   [{"way": w, "seconds": v, "median_s": med[w]} for w, v in times.items()])
