"""mccl-bench: collective benchmarks side by side with Gloo.

    mccl-bench --nproc 4 --vs gloo                      # sweep on 4 local ranks
    mccl-bench --nproc 4 --ops all_reduce -b 8 -e 64M -f 8 --json r.json --plot r.png
    mccl-bench ddp --nproc 4                            # DDP step time, comm hidden
    mccl-bench memory --nproc 4 --size 256M             # peak RSS of one all_reduce
    mccl-bench state --netlab wk --nproc 6 --receivers 2   # an elastic state to joiners: chain vs broadcast
    mccl-bench matmul --device cuda                     # FP32/TF32/BF16 TFLOP/s of this device
    mccl-bench wire-accuracy --ns 2,8,24,200            # 16-bit wire error: mccl vs bf16_compress_hook
    mccl-bench status-load                              # the status page with 200 simulated members and agents
    mccl-bench hetero --netlab hetero --speeds 1,1,2,4  # members at their own speed: shares by speed vs equal
    mccl-bench wire-accuracy --real --ns 2,3,4          # the same from real all-reduces on N ranks
    mccl-bench wire-train --netlab mccl --nproc 4       # ViT DDP per wire dtype: samples/s, loss curves
    mccl-bench diloco --netlab diloco --rates 62.5mbit,625mbit   # DDP vs (streaming) DiLoCo: utilisation
    mccl-bench diloco-quality --ns 4,8                  # DDP vs DiLoCo at equal samples: loss, accuracy
    mccl-bench diloco-host --params-m 1000             # DiLoCo's outer syncs on the training thread, real size
    mccl-bench scaling --ns 1,2,4 --json s.json         # ViT samples/s and efficiency, mccl vs Gloo
    mccl-bench training-report s1.json s2.json s3.json  # repeats of it: medians and ranges (--plot)
    mccl-bench collectives-report n16.json n24.json     # collective sweeps at several N: % of goodput (--plot)
    MCCL_TRACE_DIR=t mccl-bench ...; mccl-bench trace-report t   # where a small op's time goes
    mccl-bench --tune --nproc 4                         # measure and cache the cost model
    mccl-bench --netlab mccl --nproc 4 -b 64K -e 64M    # ranks on network-lab hosts, % of goodput
    mccl-bench --nproc 8 --ops all_reduce --sizes 8 --cpu   # also CPU per op and the cores kept busy
    torchrun --nproc_per_node 1 --nnodes 4 ... -m mccl.bench --vs gloo   # across machines

Without RANK in the environment it starts --nproc local ranks itself (rank
0's output is shown live); under torchrun each process is one rank.
training-report and collectives-report were called scaling-report and
scale-report; those names still work.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable

from .common import OPS, parse_size, sizes
from ..workloads import OPTIMIZERS


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive finite number")
    return value


def _common(p: argparse.ArgumentParser):
    p.add_argument("--nproc", type=int, default=4, help="local ranks to start (ignored under torchrun)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before local ranks are killed")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"])
    p.add_argument("--netlab", metavar="NAME",
                   help="run rank r on host r of this network lab (mccl netlab up) and report "
                        "busbw as a share of the lab's measured TCP goodput")


# ---- each mode's arguments ---------------------------------------------------------

def _collectives_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list from {','.join(OPS)}")
    p.add_argument("-b", "--min-bytes", default="8", help="smallest size (e.g. 8, 64K)")
    p.add_argument("-e", "--max-bytes", default="64M", help="largest size")
    p.add_argument("-f", "--factor", type=int, default=4, help="size multiplier between rows")
    p.add_argument("--sizes", default="", help="comma list of sizes (e.g. 8,64K,1M,64M) instead of -b/-e/-f")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--vs", choices=["gloo", "none"], default="gloo", help="compare with Gloo in the same run")
    p.add_argument("--wire-security", default="",
                   help="also time mccl groups with these MCCL_WIRE_SECURITY modes (comma list of "
                        "integrity, encrypt), interleaved with the unprotected one in the same run")
    p.add_argument("--wire-dtype", default="",
                   help="also time mccl groups with these MCCL_WIRE_DTYPE values (comma list of bf16, "
                        "fp16, int8), interleaved with the float32 one; busbw counts float32 bytes")
    p.add_argument("--bf16-hook", action="store_true",
                   help="also time Gloo the way PyTorch's bf16_compress_hook uses it (a bfloat16 copy "
                        "divided by the world size, all-reduced, copied back); all_reduce only")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size (median reported)")
    p.add_argument("--target", type=float, default=0.25, help="seconds per timed round")
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--cpu", action="store_true",
                   help="print each row's CPU time per op of all ranks together and the cores it kept "
                        "busy (always in --json)")
    p.add_argument("--json", help="write results to this JSON file")
    p.add_argument("--plot", help="draw busbw and latency against size to this PNG")
    p.add_argument("--tune", action="store_true",
                   help="measure the cost model on these ranks and cache it (see mccl.bench.tune)")
    p.add_argument("--tune-bytes", type=int, default=16 << 20, help="size of the ring run of --tune")


def _ddp_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--json")


def _scaling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ns", default="1,2,4", help="rank counts (1 first: the baseline)")
    p.add_argument("--backends", default="mccl,gloo")
    p.add_argument("--preset", default="small", help="ViT preset: tiny, small, small-deep (small's bytes in the reference's 16 blocks), small-deep-lean (the same on 8x8 images: a third of the CPU work), vit-113m")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--emulate-ms", type=float, default=0.0,
                   help="emulated device time per step (see python -m mccl.workloads.vit --help)")
    p.add_argument("--emulate-queue", action="store_true",
                   help="the emulated device runs its blocks back to back, the host's work overlapped "
                        "(see python -m mccl.workloads.vit --help)")
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS,
                   help="the workload's optimizer (see python -m mccl.workloads.vit --help)")
    p.add_argument("--bucket-mb", type=float, default=0.0, help="DDP bucket size (0: the workload's 25)")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (all-gather + reduce-scatter) instead of DDP")
    p.add_argument("--trace-buckets", action="store_true",
                   help="DDP: time every gradient bucket; adds the tail after the last bucket was ready and, "
                        "given the links' rate, how far the all-reduces end after the earliest time they could")
    p.add_argument("--link-gbit", type=float, default=0.0,
                   help="links' TCP goodput for --trace-buckets (default: the lab's measured goodput)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"])
    p.add_argument("--netlab", metavar="NAME", help="rank r on host r of this network lab")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--json")
    p.add_argument("--plot")


def _training_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="JSON")
    p.add_argument("--plot", help="efficiency against ranks, one panel per workload")


def _collectives_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="JSON")
    p.add_argument("--goodput", type=_positive_float, metavar="GBPS",
                   help="the links' TCP goodput in GB/s for every file (default: each file's measured one)")
    p.add_argument("--plot", help="%% of goodput against hosts, one panel per op")


def _trace_report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="the MCCL_TRACE_DIR the ranks ran with (one machine)")
    p.add_argument("--group", type=int, help="the group id to report (default: the one with the most ops)")
    p.add_argument("--json", help="write the report as JSON")


def _matmul_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "mps"])
    p.add_argument("-n", type=int, default=0, help="matrix size (default: 1024 cpu, 4096 mps, 8192 cuda)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json")


def _elastic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--netlab", metavar="NAME", help="member i on host i of this network lab, store on h0")
    p.add_argument("--initial", type=int, default=4, help="members at the start (one more joins)")
    p.add_argument("--params-mb", type=float, default=64.0, help="model weights in MB (float32)")
    p.add_argument("--step-ms", type=float, default=300.0, help="emulated device time per step")
    p.add_argument("--stable-steps", type=int, default=12, help="steps before the first change")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--job", default="bench")
    p.add_argument("--anchor", action="store_true",
                   help="also time torchrun's elastic restart (--nnodes MIN:MAX, Gloo) on the same hosts")
    p.add_argument("--anchor-timeout-s", type=float, default=600.0,
                   help="give up on a torchrun phase after this long (the error shows each host's log)")
    p.add_argument("--json", help="write every run's figures here")
    p.add_argument("--checkpoint-every-s", type=float, default=0.0,
                   help="members get a checkpoint folder and rank 0 saves in the background this often: "
                        "the stall of a save, against the step")
    p.add_argument("--week", action="store_true",
                   help="instead: a week of nights (dusk, churn, dawn; a store fault mid-week), one member per "
                        "host of --netlab (or --hosts here)")
    p.add_argument("--store", choices=["tcp", "etcd"], default="tcp",
                   help="the job's store: `mccl elastic serve` on host 0, or a 3-node etcd cluster on hosts 0-2 "
                        "(--week kills its leader mid-week)")
    p.add_argument("--nights", type=int, default=7)
    p.add_argument("--hosts", type=int, default=6, help="--week without --netlab: members on this machine")
    p.add_argument("--outage-s", type=float, default=60.0, help="--week --store tcp: how long the store is down")
    p.add_argument("--timeout-s", type=float, default=30.0, help="--week: the members' timeout_s")


def _hetero_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--netlab", metavar="NAME", help="member i on host i of this network lab, store on h0")
    p.add_argument("--speeds", default="1,1,2,4", help="relative speeds of the members' emulated devices")
    p.add_argument("--sample-ms", type=float, default=10.0, help="emulated device time per sample at speed 1")
    p.add_argument("--batch", type=int, default=64, help="samples per member per step (the sampler's batch)")
    p.add_argument("--params-mb", type=float, default=1.0, help="model weights in MB (float32), all-reduced")
    p.add_argument("--steps", type=int, default=40, help="steps of each job")
    p.add_argument("--warmup", type=int, default=6, help="steps left out of each rate")
    p.add_argument("--solo-steps", type=int, default=8)
    p.add_argument("--slow-member", type=int, default=-1, help="the member that slows (default: the fastest)")
    p.add_argument("--slow-at", type=int, default=15, help="the step from which it is slower")
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--cost-repeats", type=int, default=3,
                   help="equal members: jobs with equal and with speed shares, alternated, this many each (0: skip)")
    p.add_argument("--cost-steps", type=int, default=30)
    p.add_argument("--phases", default="shares,slowdown,cost",
                   help="comma list of: shares (solo, equal and speed), slowdown, cost (equal members)")
    p.add_argument("--json")


def _diloco_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--netlab", metavar="NAME", help="member i on host i of this network lab, store on h0")
    p.add_argument("--members", type=int, default=8, help="members (one per lab host)")
    p.add_argument("--params-m", type=float, default=62.5,
                   help="model parameters in millions (float32; 62.5: 1/16 of 1 B, with --rates scaled alike)")
    p.add_argument("--compute-ms", type=float, default=1000.0, help="emulated compute per (inner) step")
    p.add_argument("--modes", default="ddp,diloco,streaming", help="comma list of ddp, diloco, streaming")
    p.add_argument("--rates", default="", help="comma list of lab link rates to run at (e.g. 62.5mbit,625mbit)")
    # not --wire: on Python < 3.12 the top-level parser takes it for an ambiguous --wire-security/--wire-dtype
    p.add_argument("--outer-wire", dest="wire", default="bf16", choices=["fp32", "bf16", "fp16", "int8"],
                   help="the outer syncs' wire")
    p.add_argument("--wire-reduce", default="auto", choices=["auto", "ring", "pairwise"],
                   help="how the 16-bit outer syncs reduce (DiLoCoState(wire_reduce=...))")
    p.add_argument("--ddp-wire", default="fp32", choices=["fp32", "bf16", "fp16", "int8"], help="DDP's gradients' wire")
    p.add_argument("--H", type=int, default=50, help="inner steps per round")
    p.add_argument("--fragments", type=int, default=5, help="streaming: fragments")
    p.add_argument("--overlap", type=int, default=-1, help="streaming: inner steps a sync overlaps (-1: the gap)")
    p.add_argument("--rounds", type=int, default=3, help="DiLoCo rounds, at least 3 (the first warms up, the last ends the job; those between are measured)")
    p.add_argument("--ddp-steps", type=int, default=3, help="DDP steps (the first warms up)")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--link-gbit", type=float, default=0.0, help="without --netlab: the links' rate for the plan")
    p.add_argument("--project", default="24,200", type=lambda t: [int(x) for x in t.split(",") if x],
                   help="member counts to project to with the plan's model")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json")


def _diloco_host_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params-m", type=float, default=1000.0, help="model parameters in millions (float32)")
    p.add_argument("--tensors", default="1,100", type=lambda t: [int(x) for x in t.split(",") if x],
                   help="comma list: the model in this many tensors (1: the lab's emulation; real models: many)")
    p.add_argument("--fragments", type=int, default=4)
    p.add_argument("--outer-wire", default="bf16", choices=["fp32", "bf16", "fp16", "int8"])
    p.add_argument("--H", type=int, default=32, help="inner steps per round (for the share of a round)")
    p.add_argument("--compute-ms", type=float, default=1000.0, help="compute per inner step (for the share)")
    p.add_argument("--overlap-s", type=float, default=2.0,
                   help="seconds the training thread trains (sleeps) between a fragment's issue and its apply: "
                        "the overlapped inner steps, in which the outer thread works out the outer step (a job's "
                        "overlap is inner steps x compute: 8 s at H 32, 4 fragments, 1 s steps; shorter is "
                        "conservative)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")


def _diloco_quality_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ns", default="4,8")
    p.add_argument("--hs", default="4,8,16,32", help="DiLoCo inner steps per round to sweep")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--configs", default="", help="extra configurations, e.g. streaming:16:4,bf16:16,int8:16")
    p.add_argument("--json")
    p.add_argument("--plot")
    p.add_argument("--table", help="write the markdown table here")


def _status_load_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, default=200)
    p.add_argument("--agents", type=int, default=220)
    p.add_argument("--viewers", type=int, default=5, help="browsers polling /api/fleet every second")
    p.add_argument("--seconds", type=float, default=60.0, help="the measured stretch")
    p.add_argument("--settle-s", type=float, default=10.0, help="before measuring")
    p.add_argument("--change-s", type=float, default=15.0, help="a membership change this often")
    p.add_argument("--sample-s", type=float, default=10.0, help="the coordinator's series sampling")
    p.add_argument("--step-ms", type=float, default=300.0, help="a typical step, for the member side's share")
    p.add_argument("--loads", type=int, default=20, help="page loads over HTTP")
    p.add_argument("--no-browser", action="store_true", help="skip the headless Chromium load")
    p.add_argument("--json")


def _wire_accuracy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ns", default="2,3,4,8,24,200", help="world sizes to simulate (with --real: to run)")
    p.add_argument("--elements", type=int, default=1 << 20)
    p.add_argument("--real", action="store_true",
                   help="run real all-reduces with N ranks (and Gloo + the hook's arithmetic) instead of "
                        "simulating; checks MCCL's results bit for bit against the simulation")
    p.add_argument("--netlab", metavar="NAME", help="with --real: rank r on host r of this network lab")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json")


def _wire_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--netlab", metavar="NAME", help="rank r on host r of this network lab")
    p.add_argument("--configs", default=None,
                   help="comma list from: mccl fp32, mccl bf16 wire, mccl fp16 wire, mccl int8 wire, gloo, "
                        "gloo + bf16_compress_hook (default: all but fp16)")
    p.add_argument("--seeds", default="0,1,2", help="one run per configuration per seed")
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--emulate-ms", type=float, default=160.0)
    p.add_argument("--bucket-mb", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json")
    p.add_argument("--plot")


def _state_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--params-mb", type=float, default=64.0, help="the model's float32 parameters (the state, "
                   "with SGD momentum, is about twice this)")
    p.add_argument("--receivers", type=int, default=1, help="the last this many ranks lack the state")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")


def _memory_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--size", default="256M")
    p.add_argument("--json")


# ---- how each mode runs ------------------------------------------------------------

# run(args, argv) -> exit code; argv is the command line (ranks started here run it again).
Run = Callable[[argparse.Namespace, list[str]], int]


def _in_process(module: str, exit_code: bool = False) -> Run:
    """A mode that runs in this process: `module`'s run(args), imported when
    the mode runs; the exit code is what run returns where `exit_code`, else 0."""
    def run(args: argparse.Namespace, argv: list[str]) -> int:
        rc = importlib.import_module(f".{module}", __package__).run(args)
        return rc if exit_code else 0
    return run


def _wire_train(args: argparse.Namespace, argv: list[str]) -> int:
    from . import wire_train
    if args.configs is None:
        args.configs = wire_train.DEFAULT
    wire_train.run(args)
    return 0


def _on_ranks(body: Callable[[argparse.Namespace, object], None],
              timed: Callable[[argparse.Namespace], bool] | None = None) -> Run:
    """A mode that runs on every rank of a job: under torchrun (RANK set)
    this process is one rank and runs `body(args, spans)` in the default
    group (`spans`: how long that group took to start, where timed(args));
    otherwise it starts --nproc local ranks (or one per --netlab host) that
    run this same command line."""
    def run(args: argparse.Namespace, argv: list[str]) -> int:
        if "RANK" in os.environ:
            return _worker(args, body, timed is not None and timed(args))
        return _launch(args, argv)
    return run


def _worker(args, body, timed: bool) -> int:
    import torch
    import torch.distributed as dist

    import mccl  # noqa: F401

    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    tune_file = os.environ.get("MCCL_TUNE_FILE")
    if getattr(args, "tune", False) and tune_file and not os.path.exists(tune_file):
        del os.environ["MCCL_TUNE_FILE"]  # --tune creates it; groups start from the defaults
    spans = None
    if timed:
        from . import startup
        spans = startup.timed_init("mccl")
    else:
        dist.init_process_group("mccl")
    if tune_file:
        os.environ["MCCL_TUNE_FILE"] = tune_file
    try:
        body(args, spans)
    finally:
        dist.destroy_process_group()
    return 0


def _launch(args, argv: list[str]) -> int:
    from ..launch import run_tool

    def on_lab(lab, env):
        if not lab.goodput:
            print("# measuring the lab's TCP goodput first (iperf3, every ring link at once)", flush=True)
            from ..netlab import LabError
            try:
                lab.measure_goodput()
            except LabError as e:
                print(f"# goodput not measured, so busbw is shown without % of goodput: {e}", flush=True)
        print(f"# {lab.describe()}".replace("\n", "\n# "), flush=True)
        if lab.goodput:
            env["MCCL_BENCH_GOODPUT_GBPS"] = str(lab.goodput["min_GBps"])

    return run_tool("mccl.bench", argv, args.nproc, timeout=args.timeout, tool="mccl-bench",
                    netlab=args.netlab, on_lab=on_lab)


def _sweep_or_tune(args, spans) -> None:
    """A rank of the collective sweep, or of --tune."""
    if args.tune:
        from . import tune
        tune.run(args)
        return
    import torch.distributed as dist

    from . import collectives, startup
    args.startup = startup.report(*spans) if args.vs == "gloo" else None
    records = collectives.run(args)
    if args.plot and dist.get_rank() == 0:
        from .plot import plot
        plot(records, args.plot)
        print(f"# wrote {args.plot}", flush=True)


def _rank_of(module: str) -> Callable[[argparse.Namespace, object], None]:
    """A rank's body that is `module`'s run(args)."""
    def body(args, spans) -> None:
        importlib.import_module(f".{module}", __package__).run(args)
    return body


_sweep_on_ranks = _on_ranks(_sweep_or_tune, timed=lambda args: not args.tune)


def _collectives(args: argparse.Namespace, argv: list[str]) -> int:
    """The collective sweep (also the mode without a name): its ops and
    sizes checked here, before any rank starts."""
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in args.ops if o not in OPS]
    if bad:
        parser().error(f"unknown ops {bad}; choose from {OPS}")
    try:
        args.sizes = ([parse_size(x) for x in args.sizes.split(",")] if args.sizes
                      else sizes(parse_size(args.min_bytes), parse_size(args.max_bytes), args.factor))
    except ValueError as e:
        parser().error(str(e))
    args.vs = None if args.vs == "none" else args.vs
    return _sweep_on_ranks(args, argv)


# ---- the modes ---------------------------------------------------------------------

@dataclass(frozen=True)
class Mode:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Run
    aliases: tuple[str, ...] = ()  # former names, still accepted


# `mccl-bench MODE ...`, in the order --help lists them. A mode is its row
# here: help, its arguments, how it runs. Without a mode: collectives.
MODES: dict[str, Mode] = {
    "collectives": Mode("the collective sweep (default)", _collectives_args, _collectives),
    "ddp": Mode("DDP step time: mccl, Gloo, no sync and world size 1", _ddp_args, _on_ranks(_rank_of("ddp"))),
    "scaling": Mode("ViT training at N = 1, 2, 4 ranks: samples/s, efficiency, overlap", _scaling_args,
                    _in_process("scaling")),
    "training-report": Mode("repeated `scaling --json` runs in one table: medians and ranges",
                            _training_report_args, _in_process("training_report"), aliases=("scaling-report",)),
    "collectives-report": Mode("`mccl-bench --json` sweeps at several world sizes in one table",
                               _collectives_report_args, _in_process("collectives_report"),
                               aliases=("scale-report",)),
    "trace-report": Mode("latency breakdown from the event traces of MCCL_TRACE_DIR", _trace_report_args,
                         _in_process("trace_report", exit_code=True)),
    "matmul": Mode("FP32/TF32/BF16 matrix-product TFLOP/s of this device (no ranks)", _matmul_args,
                   _in_process("matmul")),
    "elastic": Mode("mccl.elastic: join, graceful leave and crash stalls, boundary cost", _elastic_args,
                    _in_process("elastic")),
    "hetero": Mode("members at their own speed: shares by speed against equal shares, a "
                   "member slowed mid-run, the cost when members are equal", _hetero_args, _in_process("hetero")),
    "diloco": Mode("DDP, DiLoCo and streaming DiLoCo on an emulated large model: compute "
                   "utilisation, outer syncs hidden, the plan's model beside", _diloco_args, _in_process("diloco")),
    "diloco-host": Mode("DiLoCo's outer syncs' work on the training thread at a model's real size "
                        "(a group of one, no network): seconds per fragment and per round", _diloco_host_args,
                        _in_process("diloco_host")),
    "diloco-quality": Mode("DDP against DiLoCo at equal samples on a small real task "
                           "(scikit-learn's digits): final loss and accuracy over seeds", _diloco_quality_args,
                           _in_process("diloco_quality")),
    "status-load": Mode("the fleet's status page with 200 simulated members and agents: "
                        "coordinator CPU, page load, member-side cost", _status_load_args,
                        _in_process("status_load")),
    "wire-accuracy": Mode("error of a 16-bit wire: mccl's against bf16_compress_hook's (simulated, or --real)",
                          _wire_accuracy_args, _in_process("wire_accuracy")),
    "wire-train": Mode("ViT DDP with each wire compression: samples/s and loss curves", _wire_train_args,
                       _wire_train),
    "memory": Mode("peak resident memory of one all_reduce", _memory_args, _on_ranks(_rank_of("memory"))),
    "state": Mode("an elastic job's state handed to joiners: deliver_state's chain, a broadcast through "
                  "every rank, plain sends", _state_args, _on_ranks(_rank_of("state_transfer"))),
}
_NAMES = {alias: name for name, mode in MODES.items() for alias in (name, *mode.aliases)}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="mccl-bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="mode")
    MODES["collectives"].add_arguments(ap)  # the mode without a name
    for name, mode in MODES.items():
        mode.add_arguments(sub.add_parser(name, help=mode.help, aliases=list(mode.aliases)))
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    return MODES[_NAMES[args.mode or "collectives"]].run(args, argv)
