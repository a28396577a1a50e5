"""The training checks of ``mccl selftest``: DDP and FSDP2 steps on the
device under test against a float64 CPU run of the same steps in one
process; and MPS (or CUDA) busbw beside CPU busbw in the same group."""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

from .checks import Checks

STEPS, BATCH, LR = 3, 8, 0.1


def _model() -> nn.Module:
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 4, generator=g)


def _reference(world: int) -> list[torch.Tensor]:
    """The same steps in one process, in float64: the gradient of each step
    is the mean over ranks of each rank's mean loss (what DDP computes)."""
    model = _model().double()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        loss = sum(nn.functional.mse_loss(model(x.double()), y.double())
                   for x, y in (_batch(step, r) for r in range(world))) / world
        loss.backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def _train(model: nn.Module, dev: torch.device, rank: int) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = _batch(step, rank)
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        opt.step()


def _close(got: list[torch.Tensor], want: list[torch.Tensor], tol: float) -> float:
    worst = 0.0
    for g, w in zip(got, want):
        worst = max(worst, (g.detach().to("cpu", torch.float64) - w).abs().max().item())
    if worst > tol:
        raise AssertionError(f"parameters differ from the float64 reference by {worst:.2e} (> {tol:.0e})")
    return worst


def training_checks(c: Checks) -> None:
    dev, rank, world = c.dev, c.rank, c.world
    tol = 1e-3 if dev.type == "mps" else 1e-5  # MPS float32 matmuls round differently
    want = _reference(world)

    def ddp():
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(_model().to(dev), device_ids=None)
        _train(model, dev, rank)
        return f"max |diff| {_close(list(model.module.parameters()), want, tol):.1e}"

    def fsdp2():
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch 2.5
            from torch.distributed._composable.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(dev.type, (world,))
        model = _model().to(dev)
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        _train(model, dev, rank)
        full = [p.full_tensor() for p in model.parameters()]
        return f"max |diff| {_close(full, want, tol):.1e}"

    c.run("DDP, 3 SGD steps vs float64 reference", ddp)
    c.run("FSDP2, 3 SGD steps vs float64 reference", fsdp2)


def busbw(dev: torch.device, world: int, sizes: list[int], iters: int = 5) -> list[dict]:
    """Median all_reduce busbw (GB/s) per size, on `dev` and on the CPU."""
    out = []
    devices = [dev] + ([torch.device("cpu")] if dev.type != "cpu" else [])
    for d in devices:
        for size in sizes:
            x = torch.ones(size // 4, device=d)
            for _ in range(2):
                dist.all_reduce(x)
            times = []
            for _ in range(iters):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)  # returns with the result in place (Work.wait)
                times.append(time.perf_counter() - t0)
            t = statistics.median(times)
            out.append({"device": d.type, "bytes": size,
                        "busbw_GBps": 2 * (world - 1) / world * size / t / 1e9, "median_s": t})
    return out
