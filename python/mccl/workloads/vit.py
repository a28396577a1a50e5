"""Data-parallel training of a Vision Transformer over MCCL (or any backend).

The default preset is the reference workload: a ViT with 113,503,498
parameters (width 768, depth 16, MLP 3072, 12 heads, patch 4 on 32x32
images, 10 classes). Smaller presets make quick runs. Data is synthetic and
generated locally (no downloads); every rank draws different images.

    python -m mccl.launch --nproc 2 examples/train_vit.py --preset tiny --steps 20
    python -m mccl.workloads.vit --preset tiny             (one process, installed package)
    torchrun --nnodes 4 --nproc_per_node 1 ... examples/train_vit.py --device mps --bf16

With --fsdp the model is sharded with FSDP2 (``fully_shard`` per block and
at the root): parameters are all-gathered before use and gradients
reduce-scattered, instead of DDP's gradient all-reduce.

Prints a progress line per step and a summary: samples/s over the timed
steps (after --warmup), step time, and with --measure-overlap the step time
without gradient synchronisation and the time of the gradient all-reduce
alone, from which the share of communication hidden behind backward follows
(step times are the slowest rank's, with and without synchronisation).
The summary's last line starts with RESULT and holds JSON (for tools).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from . import OPTIMIZERS

PRESETS = {
    # name: (width, depth, mlp, heads, patch, image, classes)
    "vit-113m": (768, 16, 3072, 12, 4, 32, 10),
    "small": (256, 6, 1024, 8, 4, 32, 10),
    # The reference's depth and proportions (MLP 4x width, patch 4 on 32x32)
    # at 160 wide: 4.97 M parameters, as many bytes of gradients as `small`
    # but spread over 16 blocks, so the last buckets of backward (the first
    # block and the embedding) are as small a share as ViT-113.5M's.
    "small-deep": (160, 16, 640, 5, 4, 32, 10),
    # small-deep's parameters (but 60 fewer position rows) on 8x8 images: 5
    # tokens instead of 65, so the real CPU work per step is about a third (25
    # against 73 ms a step on one core, batch 2).
    # For the network lab, where many ranks share a host's cores: it tests
    # whether that work spreads the ranks apart (on the 24-host lab it did
    # not: the skew stayed at 50-55 ms, docs/benchmarks.md).
    "small-deep-lean": (160, 16, 640, 5, 4, 8, 10),
    "tiny": (64, 2, 128, 2, 8, 32, 10),
}


HOOKS = ("none", "wire-bf16", "wire-fp16", "int8", "bf16-compress")


def register_hook(ddp, name: str) -> None:
    """Registers the --comm-hook `name` on `ddp` (every rank, collectively)."""
    if name == "none":
        return
    if name == "bf16-compress":
        ddp.register_comm_hook(None, bf16_compress_like_hook)
        return
    import mccl.hooks
    if name == "int8":
        ddp.register_comm_hook(mccl.hooks.Int8State(), mccl.hooks.int8_allreduce_hook)
    else:
        ddp.register_comm_hook(mccl.hooks.wire_group(name[5:]), mccl.hooks.wire_allreduce_hook)


def bf16_compress_like_hook(process_group, bucket):  # (no annotation: DDP checks a real one)
    """What PyTorch's ddp_comm_hooks.default_hooks.bf16_compress_hook does
    (a bfloat16 copy of the bucket divided by the world size, all-reduced,
    copied back), for any backend and device: DDP refuses to register a hook
    by that name unless CUDA and NCCL (or XPU and XCCL) are present, so not
    on a CPU host nor on a Mac."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size(group))
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(fut):
        buffer.copy_(fut.value()[0])
        return buffer

    return fut.then(decompress)


class DeviceQueue:
    """The emulated device's timeline with the host's work overlapped (the
    workload's --emulate-queue), as a GPU runs queued kernels while the host
    launches more: the device runs its blocks back to back, and the host's
    own work between two blocks (here this model's real arithmetic on the
    CPU, and the optimizer) is hidden behind the device's time. It adds to
    the step only where it outlasts the device's, and a host that is late by
    some milliseconds (a rank descheduled on a crowded lab host, a sleep that
    overslept) catches up at the next block instead of carrying the delay to
    the end of the step.

    `restart()` says the device's next block can start no earlier than now:
    its inputs exist only now (the step's gradients were just synchronised,
    or the host waited for everyone). `run(s)`, called when the host has
    done its work for a block, is that block of s seconds: the device began
    it where the previous block ended, so it ends s later, and `run` sleeps
    until then; a host that comes after that finds it done and goes on at
    once (the device idled for the difference).

    The host's work after the last block of backward (the first transformer
    block's and the embedding's gradients) is not hidden: a fixed cost per
    step, the same at every world size. DDP only: FSDP's waits for its
    all-gathers inside forward and backward would be hidden too, as if every
    prefetch were perfect, so the workload refuses the two together."""

    def __init__(self):
        self.t: float | None = None  # when the device's latest block ends (or its next may start)

    def restart(self) -> None:
        self.t = time.perf_counter()

    def run(self, s: float) -> None:
        now = time.perf_counter()
        self.t = max(now, (now if self.t is None else self.t) + s)
        if self.t > now:
            time.sleep(self.t - now)


class _DeviceTime(torch.autograd.Function):
    """Identity whose forward and backward each take a fixed time (sleeping,
    so the host's cores stay free): an emulated accelerator's compute. With
    a DeviceQueue the time runs on the queue's timeline (the host's work
    overlapped); without, each sleep adds to the host's work."""

    @staticmethod
    def forward(ctx, x, fwd_s: float, bwd_s: float, queue):
        ctx.bwd_s, ctx.queue = bwd_s, queue
        _device_time(queue, fwd_s)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        _device_time(ctx.queue, ctx.bwd_s)
        return grad, None, None, None


def _device_time(queue, s: float) -> None:
    if queue is None:
        time.sleep(s)
    else:
        queue.run(s)


class Block(nn.Module):
    def __init__(self, width: int, mlp: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, mlp)
        self.fc2 = nn.Linear(mlp, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    def __init__(self, width, depth, mlp, heads, patch, image, classes):
        super().__init__()
        self.embed = nn.Conv2d(3, width, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, mlp, heads) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)
        self.emulate_s = 0.0  # emulated device time per step, spread over the blocks
        self.queue = None  # a DeviceQueue: the host's work overlaps the emulated time

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        per = self.emulate_s / len(self.blocks)
        for blk in self.blocks:
            x = blk(x)
            if per > 0:  # a third forward, two thirds backward, as on a real device
                x = _DeviceTime.apply(x, per / 3, 2 * per / 3, self.queue)
        return self.head(self.ln(x[:, 0]))


def build(preset: str) -> nn.Module:
    return ViT(*PRESETS[preset])


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="vit-113m", choices=sorted(PRESETS))
    ap.add_argument("--backend", default="mccl", help="torch.distributed backend (mccl, gloo, nccl)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"])
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast for forward and backward")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP gradient bucket size")
    ap.add_argument("--fsdp", action="store_true",
                    help="shard the model with FSDP2 (fully_shard per block) instead of DDP")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS,
                    help="AdamW one tensor at a time (torch's default off CUDA) or fused (fused=True: one "
                         "kernel for all parameters, about a third of the CPU time on a CPU host)")
    ap.add_argument("--measure-overlap", action="store_true",
                    help="also time steps without gradient sync and the gradient all-reduce alone")
    ap.add_argument("--trace-buckets", action="store_true",
                    help="DDP: time each gradient bucket (ready, reduced) and print the last step's timeline "
                         "and the tail after the last bucket was ready")
    ap.add_argument("--link-gbit", type=float, default=0.0,
                    help="with --trace-buckets: the links' TCP goodput, to report how far the all-reduces "
                         "end after the earliest time any ring all-reduce could on such links")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave as is)")
    ap.add_argument("--emulate-ms", type=float, default=0.0,
                    help="add this much emulated device time per step (sleeps after each block, a third "
                         "in forward and two thirds in backward): with a small --batch the step is then "
                         "the emulated device's, and ranks sharing a host's cores (network lab) do not "
                         "slow each other down")
    ap.add_argument("--emulate-queue", action="store_true",
                    help="with --emulate-ms: the emulated device runs its blocks back to back while the host "
                         "works on the next, as a GPU runs queued kernels (DeviceQueue): the host's own work "
                         "(this model's real arithmetic, a rank descheduled on a crowded lab host) is hidden "
                         "behind the device's time instead of adding to it")
    ap.add_argument("--quiet", action="store_true", help="no per-step progress lines")
    ap.add_argument("--comm-hook", default="none", choices=sorted(HOOKS),
                    help="DDP communication hook: wire-bf16/wire-fp16 (mccl.hooks.wire_allreduce_hook on a "
                         "16-bit-wire group), int8 (mccl.hooks.int8_allreduce_hook), bf16-compress "
                         "(PyTorch's bf16_compress_hook, any backend)")
    ap.add_argument("--seed", type=int, default=0, help="initial weights and data")
    ap.add_argument("--loss-curve", action="store_true",
                    help="record every timed step's loss, averaged over the ranks (one extra all-reduce)")
    args = ap.parse_args(argv)
    if args.emulate_queue and not args.emulate_ms:
        ap.error("--emulate-queue: give the device's time with --emulate-ms")
    if args.emulate_queue and args.fsdp:
        ap.error("--emulate-queue models DDP's step: with --fsdp it would hide the waits for the all-gathers")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # One rank (WORLD_SIZE=1) trains alone: the baseline of scaling runs.
    distributed = "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        if args.backend == "mccl":
            import mccl  # noqa: F401
        dist.init_process_group(args.backend)
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device(args.device)

    torch.manual_seed(args.seed)  # same initial weights everywhere
    model = build(args.preset).to(dev)
    model.emulate_s = args.emulate_ms / 1000.0
    if args.emulate_queue:
        model.queue = DeviceQueue()
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"# ViT preset {args.preset}: {nparams:,} parameters; {world} rank(s), backend "
              f"{args.backend if distributed else 'none'}, device {dev}, batch {args.batch}/rank"
              f"{', bf16 autocast' if args.bf16 else ''}"
              f"{f', {args.emulate_ms:g} ms emulated device time per step' if args.emulate_ms else ''}"
              f"{' (queued: host work overlapped)' if args.emulate_queue else ''}", flush=True)
    ddp = model
    if distributed and world > 1 and args.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch 2.5: FSDP2 was torch.distributed._composable.fsdp
            from torch.distributed._composable.fsdp import fully_shard
        mesh = init_device_mesh(dev.type, (world,))
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh)
        fully_shard(model, mesh=mesh)
    elif distributed and world > 1:
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
        register_hook(ddp, args.comm_hook)
    if args.comm_hook != "none" and ddp is model:
        raise SystemExit(f"--comm-hook {args.comm_hook}: DDP over 2 or more ranks only")
    trace = None
    if args.trace_buckets and ddp is not model:
        from .bucket_trace import BucketTrace
        trace = BucketTrace(ddp)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, fused=args.optimizer == "adamw-fused" or None)
    image = PRESETS[args.preset][5]
    gen = torch.Generator().manual_seed(1000 + rank + 7919 * args.seed)
    data = [(torch.randn(args.batch, 3, image, image, generator=gen).to(dev),
             torch.randint(0, PRESETS[args.preset][6], (args.batch,), generator=gen).to(dev))
            for _ in range(4)]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()
        elif dev.type == "mps":
            torch.mps.synchronize()

    def step(i, sync_grads=True):
        x, y = data[i % len(data)]
        opt.zero_grad(set_to_none=True)
        ctx = ddp.no_sync() if (not sync_grads and ddp is not model) else _null()
        with ctx:  # forward and backward both inside no_sync
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
                loss = F.cross_entropy(ddp(x), y)
            if trace and sync_grads:
                trace.begin()
            loss.backward()
            if trace and sync_grads:
                trace.end()
        if model.queue is not None:
            model.queue.restart()  # the gradients are synchronised only now: the optimizer and the
            # next forward run on the device from here (their host work hidden behind its blocks)
        opt.step()
        return loss

    def timed(n, sync_grads=True, label="train"):
        for i in range(args.warmup):
            step(i, sync_grads)
        sync()
        if distributed:
            dist.barrier()
        if model.queue is not None:
            model.queue.restart()
        if trace:
            trace.clear()  # the timed steps only
        t0 = time.perf_counter()
        loss = None
        for i in range(n):
            loss = step(i, sync_grads)
            if curve is not None and sync_grads:
                curve.append(loss.detach().float().reshape(1))  # averaged over ranks after the timing
            if rank == 0 and not args.quiet:
                done = i + 1
                bar = "#" * (20 * done // n)
                print(f"\r[{bar:<20}] {label} step {done}/{n} loss {loss.item():.3f}", end="", flush=True)
        sync()
        dt = time.perf_counter() - t0
        if rank == 0 and not args.quiet:
            print(flush=True)
        return dt / n, float(loss.item())

    curve = [] if args.loss_curve else None
    step_s, loss = timed(args.steps)
    buckets = None
    if trace:
        everyone = [None] * world  # every rank's passes, for the floor without rank skew
        dist.all_gather_object(everyone, trace.passes)
        buckets = trace.summary(world, args.link_gbit * 1e9 / 8, everyone)
    result = {"preset": args.preset, "params": nparams, "world": world,
              "backend": args.backend if distributed else "none", "device": str(dev),
              "batch_per_rank": args.batch, "bf16": args.bf16, "emulate_ms": args.emulate_ms,
              "emulate_queue": args.emulate_queue, "optimizer": args.optimizer,
              "bucket_mb": args.bucket_mb, "fsdp": args.fsdp and distributed and world > 1, "step_s": step_s,
              "samples_per_s": world * args.batch / step_s, "final_loss": loss,
              "comm_hook": args.comm_hook, "seed": args.seed}
    if curve is not None:
        losses = torch.cat(curve).cpu()
        if distributed:
            dist.all_reduce(losses)
            losses /= world
        result["losses"] = [float(x) for x in losses]
    if buckets:
        result["bucket_trace"] = buckets
        # Every rank's timed passes (hand-over and completion of each bucket,
        # in ms after that rank's backward began; wall0 places them on one
        # clock), for analyses beyond the summary.
        result["bucket_trace_ranks"] = [
            [{"wall0": p["wall0"], "end_ms": p["end_ms"],
              "buckets": [[b["index"], b["bytes"], b["ready_ms"], b["done_ms"]] for b in p["buckets"]]}
             for p in passes] for passes in everyone]
    if args.measure_overlap and ddp is not model:  # (DDP only: FSDP's all-gathers cannot be skipped)
        result["step_nosync_s"], _ = timed(args.steps, sync_grads=False, label="no-sync")
        flat = torch.zeros(nparams, device=dev)
        for _ in range(2):
            dist.all_reduce(flat)
        sync()
        t0 = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(flat)
        sync()
        result["allreduce_s"] = (time.perf_counter() - t0) / 3
    if distributed:
        # The slowest rank's time is the job's, with and without the
        # gradients' synchronisation.
        t = torch.tensor([step_s, result.get("step_nosync_s", 0.0)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=dist.new_group(backend="gloo") if args.backend != "gloo" else None)
        result["step_s"] = float(t[0])
        result["samples_per_s"] = world * args.batch / result["step_s"]
        if "step_nosync_s" in result:
            result["step_nosync_s"] = float(t[1])
    if "allreduce_s" in result:
        comm = result["allreduce_s"]
        exposed = max(0.0, result["step_s"] - result["step_nosync_s"])
        result["hidden_share"] = max(0.0, min(1.0, 1 - exposed / comm)) if comm > 0 else 1.0
    if rank == 0:
        print(f"# {result['samples_per_s']:.1f} samples/s, {result['step_s'] * 1000:.1f} ms/step, "
              f"final loss {loss:.3f}", flush=True)
        if "hidden_share" in result:
            print(f"# step without sync {result['step_nosync_s'] * 1000:.1f} ms; gradient all-reduce alone "
                  f"{result['allreduce_s'] * 1000:.1f} ms; {100 * result['hidden_share']:.0f}% of it hidden",
                  flush=True)
        if buckets:
            print(trace.render(buckets), flush=True)
        print("RESULT " + json.dumps(result), flush=True)
    if distributed:
        # DDP's reducer holds the process group: release it (and the groups'
        # tensors) before destroying, or the group is torn down at interpreter
        # exit, where Gloo's threads sometimes abort the process.
        del ddp, opt, model, data
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    return 0


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    sys.exit(main())
