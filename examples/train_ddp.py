"""Train a small network with DistributedDataParallel over mccl.

Synthetic data (no downloads): inputs are random vectors and the labels come
from a fixed random "teacher" network, so the loss falls as the student
learns. Every rank draws its own shard of each global batch.

On this machine (starts N local ranks itself):
    python examples/train_ddp.py --nproc 4 --steps 300

Across machines (run on each, with the same --master_addr):
    torchrun --nnodes 2 --nproc_per_node 1 --node_rank 0 \
        --master_addr 10.0.0.1 --master_port 29500 examples/train_ddp.py --steps 300
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=4, help="local ranks to start when not under torchrun")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--backend", default="mccl", help="mccl or gloo (for comparison)")
    p.add_argument("--bucket-mb", type=float, default=1.0, help="DDP bucket size (MB)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900, help="seconds before local ranks are killed")
    return p.parse_args(argv)


class Progress:
    """A one-line progress bar on a terminal; periodic lines otherwise."""

    def __init__(self, total: int, every: int = 25):
        self.total, self.every = total, every
        self.tty = sys.stdout.isatty()
        self.start = time.perf_counter()

    def update(self, step: int, loss: float, sps: float):
        if not self.tty and step % self.every and step != self.total:
            return
        width = 30
        done = int(width * step / self.total)
        bar = "#" * done + "-" * (width - done)
        line = f"step {step:>5}/{self.total} [{bar}] loss {loss:7.4f}  {sps:9.1f} samples/s"
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)

    def close(self):
        if self.tty:
            print(flush=True)


def make_model(inputs: int, hidden: int, classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, classes),
    )


def worker(args) -> int:
    import mccl  # noqa: F401  registers backend "mccl"

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    inputs, classes = 256, 10

    torch.manual_seed(1234)  # the teacher is the same on every rank
    teacher = make_model(inputs, 64, classes)
    torch.manual_seed(args.seed)  # so is the student's initialisation
    model = DDP(make_model(inputs, args.hidden, classes), bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # each rank its own shard
    params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"DDP over {args.backend}: {world} ranks, {params:,} parameters, "
              f"{args.batch} samples/rank/step, {args.steps} steps", flush=True)

    bar = Progress(args.steps) if rank == 0 else None
    first_loss = None
    window_start, window_samples = time.perf_counter(), 0
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, inputs, generator=gen)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # DDP all-reduces gradient buckets during backward
        opt.step()
        window_samples += args.batch * world
        if step == 1 or step % 10 == 0 or step == args.steps:
            # The global mean loss, itself an allreduce.
            l = loss.detach().clone()
            dist.all_reduce(l, op=dist.ReduceOp.AVG if args.backend == "mccl" else dist.ReduceOp.SUM)
            if args.backend != "mccl":
                l /= world
            if first_loss is None:
                first_loss = l.item()
            now = time.perf_counter()
            sps = window_samples / max(now - window_start, 1e-9)
            window_start, window_samples = now, 0
            if bar:
                bar.update(step, l.item(), sps)
            last_loss = l.item()
    elapsed = time.perf_counter() - t0
    if bar:
        bar.close()

    # DDP keeps replicas identical: check it across ranks.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    spread = (hi - lo).abs().max().item()
    if rank == 0:
        samples = args.steps * args.batch * world
        print("summary:")
        print(f"  backend           {args.backend}")
        print(f"  ranks             {world}")
        print(f"  steps             {args.steps}")
        print(f"  samples           {samples:,}")
        print(f"  wall time         {elapsed:.2f} s")
        print(f"  throughput        {samples / elapsed:,.1f} samples/s")
        print(f"  loss              {first_loss:.4f} -> {last_loss:.4f}")
        print(f"  replica spread    {spread:.3g} (max |difference| of parameters across ranks)")
    dist.destroy_process_group()
    ok = spread == 0.0 and last_loss < first_loss
    if rank == 0 and not ok:
        print("FAILED: replicas differ or the loss did not fall", file=sys.stderr)
    return 0 if ok else 1


def main(argv=None) -> int:
    args = parse(argv)
    if "RANK" in os.environ:  # under torchrun or mccl.launch
        return worker(args)
    from mccl.launch import LaunchError, run

    cmd = [sys.executable, os.path.abspath(__file__), *(argv if argv is not None else sys.argv[1:])]
    try:
        run(cmd, args.nproc, timeout=args.timeout, stream_rank=0, env={"OMP_NUM_THREADS": "1"})
    except LaunchError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
