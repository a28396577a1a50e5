"""How much of DDP's communication hides behind backward.

For the same model, batch and ranks it times a training step four ways:
  world 1   one process alone (no communication, no sharing of cores)
  no sync   every rank steps under DDP's no_sync(): the same compute and
            contention as a real run, without gradient all-reduces
  mccl      DDP over mccl
  gloo      DDP over Gloo
and the all-reduce of all gradients alone (bucketed as DDP does, no
compute). exposed = step - no-sync step; hidden = 1 - exposed / comm alone.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from .common import destroy_gloo, median, metadata, write_json


def _model(width: int, depth: int) -> torch.nn.Module:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def _steps(model, opt, x, y, steps: int, sync: bool) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if sync:
            loss.backward()
        else:
            with model.no_sync():
                loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times


def _slowest(t: float, group=None) -> float:
    v = torch.tensor([t], dtype=torch.float64)
    dist.all_reduce(v, op=dist.ReduceOp.MAX, group=group)
    return float(v.item())


def run(args) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.width)
    y = torch.randint(0, 10, (args.batch,))
    gloo = dist.new_group(backend="gloo")
    res = {}
    if rank == 0:
        solo = _model(args.width, args.depth)
        opt = torch.optim.SGD(solo.parameters(), lr=1e-3)
        _steps_plain(solo, opt, x, y, args.warmup)
        res["world1_ms"] = median(_steps_plain(solo, opt, x, y, args.steps)) * 1e3
    dist.barrier()
    for name, group in (("mccl", None), ("gloo", gloo)):
        model = DDP(_model(args.width, args.depth), process_group=group, bucket_cap_mb=args.bucket_mb)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        _steps(model, opt, x, y, args.warmup, True)
        nosync = median(_steps(model, opt, x, y, args.steps, False))
        synced = median(_steps(model, opt, x, y, args.steps, True))
        # Gradient all-reduce alone, in DDP-sized buckets.
        grads = [p.detach().clone().reshape(-1) for p in model.parameters()]
        flat = torch.cat(grads)
        cap = int(args.bucket_mb * 2**20 / 4)
        buckets = [flat[i:i + cap].clone() for i in range(0, flat.numel(), cap)]
        comm = []
        for _ in range(args.warmup + args.steps):
            dist.barrier(group=group)
            t0 = time.perf_counter()
            works = [dist.all_reduce(b, group=group, async_op=True) for b in buckets]
            for w in works:
                w.wait()
            comm.append(time.perf_counter() - t0)
        res[name] = {
            "step_ms": _slowest(synced, group) * 1e3,
            "nosync_ms": _slowest(nosync, group) * 1e3,
            "comm_ms": _slowest(median(comm[args.warmup:]), group) * 1e3,
        }
        r = res[name]
        exposed = max(0.0, r["step_ms"] - r["nosync_ms"])
        r["exposed_ms"] = exposed
        r["hidden_share"] = max(0.0, min(1.0, 1 - exposed / r["comm_ms"])) if r["comm_ms"] > 0 else 1.0
    params = sum(p.numel() for p in _model(args.width, args.depth).parameters())
    if rank == 0:
        print(f"# DDP step on {world} ranks: {params:,} parameters ({params * 4 / 2**20:.1f} MiB of "
              f"gradients), batch {args.batch}/rank, buckets {args.bucket_mb} MB, median of {args.steps}")
        print(f"# world size 1 (one process alone): {res['world1_ms']:.1f} ms/step")
        print(f"{'backend':>8} {'step(ms)':>10} {'no-sync(ms)':>12} {'comm alone(ms)':>15} "
              f"{'exposed(ms)':>12} {'hidden':>8}")
        for name in ("mccl", "gloo"):
            r = res[name]
            print(f"{name:>8} {r['step_ms']:>10.1f} {r['nosync_ms']:>12.1f} {r['comm_ms']:>15.1f} "
                  f"{r['exposed_ms']:>12.1f} {r['hidden_share'] * 100:>7.0f}%")
        print(f"# step time ratio gloo/mccl: {res['gloo']['step_ms'] / res['mccl']['step_ms']:.2f}x")
        if args.json:
            write_json(args.json, metadata({"mode": "ddp", "params": params}), [res])
    destroy_gloo(gloo)
    return res


def _steps_plain(model, opt, x, y, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times
