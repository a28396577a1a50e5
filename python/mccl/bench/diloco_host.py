"""`mccl-bench diloco-host`: what DiLoCo's outer syncs cost the training
thread on this machine, at a model's real size, without a network.

The lab's `mccl-bench diloco` scales bytes and links down together, which
keeps every transfer's duration but shrinks the host's share of an outer
sync (the pseudo-gradient, the copy onto the wire, the outer optimizer's
step and the merge) by the same factor. This measures that share at full
size: a DiLoCoState over a float32 model of --params-m million parameters
in one tensor or in several (a real model's layers), in a group of one,
each fragment held, issued and applied as the job's loop does it, the
all-reduce itself (a group of one: a no-op) aside. Between a fragment's
issue and its apply the training thread sleeps --overlap-s (the inner
steps it trains meanwhile, emulated: a sleep leaves the cores and the
memory bus to the state's outer thread, as an accelerator's compute
mostly does), while the outer thread works out the outer step.

It prints, per fragment and per round: the training thread's own time
(hold, issue, apply: the apply's wait for the outer thread included, which
is what the job's loop feels) and the outer thread's, and the training
thread's time as a share of a round of H inner steps of --compute-ms.

    mccl-bench diloco-host --params-m 1000 --fragments 4 --tensors 1,100 --H 32
"""

from __future__ import annotations

import json
import os
import statistics
import time


def _model(params: int, tensors: int):
    import torch
    per = params // tensors
    sizes = [per] * (tensors - 1) + [params - per * (tensors - 1)]
    m = torch.nn.Module()
    m.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n) * 0.01) for n in sizes])
    return m


def measure(params: int, tensors: int, fragments: int, rounds: int, wire: str, overlap_s: float) -> dict:
    import torch
    import torch.distributed as dist

    import mccl.elastic as elastic
    model = _model(params, tensors)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    state = elastic.DiLoCoState(model, inner, outer, elastic.ElasticSampler(1000, batch=1), H=fragments * 2,
                                wire_dtype=wire, fragments=fragments)
    group = dist.group.WORLD
    parts: dict[str, list[float]] = {"hold_s": [], "issue_s": [], "apply_s": [], "apply_wait_s": [],
                                     "outer_thread_s": []}
    per_round = []
    for r in range(rounds + 1):  # the first round warms the buffers up
        state.start_round(("me",))
        t_round = 0.0
        for f in range(fragments):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1e-4)  # the inner steps moved the model
            state.trained()
            t0 = time.perf_counter()
            state.hold(f)
            t1 = time.perf_counter()
            state.issue(f, group)
            t2 = time.perf_counter()
            time.sleep(overlap_s)  # the overlapped inner steps
            t3 = time.perf_counter()
            rec = state.apply(f, (f + 1) * 2)
            t4 = time.perf_counter()
            if r > 0:
                parts["hold_s"].append(t1 - t0)
                parts["issue_s"].append(t2 - t1)
                parts["apply_s"].append(t4 - t3)
                parts["apply_wait_s"].append(rec["waited_s"])
                parts["outer_thread_s"].append(rec.get("outer_thread_s", 0.0))
            t_round += (t1 - t0) + (t2 - t1) + (t4 - t3)
        if r > 0:
            per_round.append(t_round)
    del state, model, inner, outer
    return {"params": params, "tensors": tensors, "fragments": fragments, "wire": wire, "overlap_s": overlap_s,
            "per_fragment": {k: statistics.median(v) for k, v in parts.items()},
            "per_round_s": statistics.median(per_round), "rounds": per_round,
            "outer_thread_per_round_s": statistics.median(parts["outer_thread_s"]) * fragments}


def run(args) -> None:
    import torch
    import torch.distributed as dist
    params = int(args.params_m * 1e6)
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    print(f"# DiLoCo's outer syncs, the training thread's time (the overlapped inner steps emulated by a "
          f"{args.overlap_s:g} s sleep per fragment), this machine ({os.cpu_count()} cores, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads): {params / 1e6:g} M float32 parameters "
          f"({params * 4 / 1e9:.2f} GB), {args.fragments} fragments, {args.outer_wire} wire; medians of "
          f"{args.rounds} rounds after one to warm up", flush=True)
    round_s = args.H * args.compute_ms / 1000
    measure(max(10_000, params // 100), 1, args.fragments, 1, args.outer_wire, 0.0)  # torch's first touches
    rows = []
    for tensors in args.tensors:
        r = measure(params, tensors, args.fragments, args.rounds, args.outer_wire, args.overlap_s)
        r["share_of_round"] = r["per_round_s"] / (round_s + r["per_round_s"])
        rows.append(r)
        pf = r["per_fragment"]
        print(f"{tensors:>5} tensor(s): per fragment hold {pf['hold_s']:.3f} s, issue {pf['issue_s']:.3f} s, "
              f"apply {pf['apply_s']:.3f} s (of it waiting for the outer thread {pf['apply_wait_s']:.3f} s); "
              f"training thread per round {r['per_round_s']:.2f} s = {100 * r['share_of_round']:.1f} % of a round "
              f"of H = {args.H} x {args.compute_ms:g} ms; outer thread per round "
              f"{r['outer_thread_per_round_s']:.2f} s (overlapped)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))},
                       "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}, f, indent=1)
    dist.destroy_process_group()
