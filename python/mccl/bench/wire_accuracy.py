"""Accuracy of a 16-bit wire (and of the int8 wire, one step without error
feedback): MCCL's (float32 accumulation, one rounding per
hop) against PyTorch's ``bf16_compress_hook`` (a bfloat16 all-reduce: the
sum is rounded to bfloat16 at every hop), at the same bytes on the wire.

All are simulated in one process, in the order the real ones compute: MCCL's
pairwise exchange (algo/allreduce_pairwise_wire.cc) has block b's owner add,
in float32, every other rank's values rounded once to the wire, then divide
(AVG) and round once; MCCL's ring (allreduce_ring_wire.cc) and the hook round
the growing partial sum at every hop (the ring adds in float32 between
roundings, the hook in bfloat16). The simulation is checked bit-for-bit against
real MCCL all-reduces (tests/python/test_wire_accuracy.py), so its figures
at 24 or 200 ranks are what such a fleet would compute.

    mccl-bench wire-accuracy --ns 2,4,8,24,200 --elements 1M
"""

from __future__ import annotations

import json

import torch

WIRE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def partition(count: int, n: int) -> list[tuple[int, int]]:
    """MCCL's block partition: (offset, length); the first count % n blocks get one more."""
    base, extra = divmod(count, n)
    out, off = [], 0
    for b in range(n):
        length = base + (1 if b < extra else 0)
        out.append((off, length))
        off += length
    return out


def mccl_ring(xs: list[torch.Tensor], wire: str, avg: bool = True) -> torch.Tensor:
    """MCCL_WIRE_REDUCE=ring: block b's partial sum starts at rank b; each
    later rank adds its float32 values to the 16-bit partial sum it received
    (in float32) and rounds the result for the next hop; the owner divides
    (AVG) and rounds once."""
    n, w = len(xs), WIRE[wire]
    out = torch.empty_like(xs[0])
    for b, (off, length) in enumerate(partition(xs[0].numel(), n)):
        if length == 0:
            continue
        p = xs[b][off:off + length].clone()
        for k in range(1, n):
            p = xs[(b + k) % n][off:off + length] + p.to(w).to(torch.float32)
        if avg:
            p = p / n
        out[off:off + length] = p.to(w).to(torch.float32)
    return out


def mccl_wire(xs: list[torch.Tensor], wire: str, avg: bool = True) -> torch.Tensor:
    """MCCL_WIRE_REDUCE=pairwise: block b's owner adds, in float32 and in step
    order k = 1..n-1, rank (b-k)'s values rounded once to the wire; divides
    (AVG); rounds the result once."""
    n, w = len(xs), WIRE[wire]
    out = torch.empty_like(xs[0])
    for b, (off, length) in enumerate(partition(xs[0].numel(), n)):
        if length == 0:
            continue
        acc = xs[b][off:off + length].clone()
        for k in range(1, n):
            acc = acc + xs[(b - k) % n][off:off + length].to(w).to(torch.float32)
        if avg:
            acc = acc / n
        out[off:off + length] = acc.to(w).to(torch.float32)
    return out


def mccl_int8(xs: list[torch.Tensor], avg: bool = True) -> torch.Tensor:
    """MCCL_WIRE_DTYPE=int8 (allreduce_pairwise_int8.cc): the buffer's groups
    of 256 split into n blocks; block b's owner starts from its own values'
    round trip and adds, in float32 and in step order k = 1..n-1, rank
    (b-k)'s; divides (AVG); encodes the result once. No error feedback."""
    from mccl import _C

    n, count = len(xs), xs[0].numel()
    rt = [_C._int8_round_trip(x.contiguous()) for x in xs]
    out = torch.empty_like(xs[0])
    for b, (g0, glen) in enumerate(partition(-(-count // 256), n)):
        off, end = g0 * 256, min((g0 + glen) * 256, count)
        if end <= off:
            continue
        acc = rt[b][off:end].clone()
        for k in range(1, n):
            acc = acc + rt[(b - k) % n][off:end]
        if avg:
            acc = acc / n
        out[off:end] = _C._int8_round_trip(acc.contiguous())
    return out


def bf16_hook_ring(xs: list[torch.Tensor]) -> torch.Tensor:
    """PyTorch's bf16_compress_hook: each rank's bfloat16(x) / n, then a ring
    sum whose partial sums are bfloat16 at every hop (same block order)."""
    n = len(xs)
    q = [x.to(torch.bfloat16).div_(n) for x in xs]
    out = torch.empty_like(xs[0])
    for b, (off, length) in enumerate(partition(xs[0].numel(), n)):
        if length == 0:
            continue
        p = q[b][off:off + length].clone()
        for k in range(1, n):
            p = p + q[(b + k) % n][off:off + length]  # bfloat16 + bfloat16, rounded to bfloat16
        out[off:off + length] = p.to(torch.float32)
    return out


def gradients(n: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """Gradient-like float32 data: a component all ranks share plus each
    rank's own noise, in magnitudes spread over several decades."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(torch.randn(count, generator=g) * 2.0)
    shared = torch.randn(count, generator=g) * scale
    return [(shared + 0.5 * torch.randn(count, generator=g) * scale).float() for _ in range(n)]


def errors(got: torch.Tensor, want: torch.Tensor) -> dict:
    d = (got.double() - want)
    return {"rel_l2": float(d.norm() / want.norm()), "max_rel": float((d.abs() / want.abs().clamp_min(1e-30)).median())}


def run(args) -> list[dict]:
    if getattr(args, "real", False):
        return run_real(args)
    ns = [int(x) for x in args.ns.split(",")]
    count = args.elements
    rows = []
    print("# relative L2 error of the average against float64 (median |relative error| per element in brackets)")
    print(f"{'N':>5} {'mccl bf16 pairwise':>22} {'mccl fp16 pairwise':>22} {'mccl bf16 ring':>22} "
          f"{'bf16_compress_hook':>22} {'hook / pairwise':>16} {'hook / ring':>12} {'mccl int8':>22}")
    for n in ns:
        xs = gradients(n, count, seed=n)
        want = torch.stack([x.double() for x in xs]).mean(0)
        row = {"n": n, "elements": count}
        for name, got in (("mccl_bf16", mccl_wire(xs, "bf16")), ("mccl_fp16", mccl_wire(xs, "fp16")),
                          ("mccl_bf16_ring", mccl_ring(xs, "bf16")), ("bf16_compress_hook", bf16_hook_ring(xs)),
                          ("mccl_int8", mccl_int8(xs))):
            row[name] = errors(got, want)
        rows.append(row)
        cell = lambda k: f"{row[k]['rel_l2']:.3e} ({row[k]['max_rel']:.1e})"  # noqa: E731
        hook = row['bf16_compress_hook']['rel_l2']
        print(f"{n:>5} {cell('mccl_bf16'):>22} {cell('mccl_fp16'):>22} {cell('mccl_bf16_ring'):>22} "
              f"{cell('bf16_compress_hook'):>22} {hook / row['mccl_bf16']['rel_l2']:>15.2f}x "
              f"{hook / row['mccl_bf16_ring']['rel_l2']:>11.2f}x {cell('mccl_int8'):>22}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"# wrote {args.json}")
    return rows


def run_real(args) -> list[dict]:
    """--real: for each N, N ranks (local, or on a network lab's hosts) run
    the all-reduces themselves (mccl.bench.wire_accuracy_real); rank 0's
    errors against float64, and whether MCCL's results are the simulation's
    bits."""
    import sys

    from ..launch import LaunchError, run as launch

    ns = [int(x) for x in args.ns.split(",")]
    if min(ns) < 2:
        raise SystemExit("mccl-bench wire-accuracy --real: every N must be at least 2")
    placement = {}
    if args.netlab:
        from ..netlab import lab_for
        lab = lab_for(args.netlab, max(ns), "mccl-bench wire-accuracy")[0]  # (checks it holds the largest N)
    names = ("mccl_bf16", "mccl_fp16", "mccl_bf16_ring", "mccl_int8", "bf16_compress_hook")
    print(f"# real all-reduces (AVG) of {args.elements} float32 values"
          f"{' on network lab ' + args.netlab if args.netlab else ' on local ranks'}: relative L2 error against "
          "float64; '=' marks a result bit-identical to the one-process simulation")
    print(f"{'N':>3} {'mccl bf16 pairwise':>19} {'mccl fp16 pairwise':>19} {'mccl bf16 ring':>16} {'mccl int8':>12} "
          f"{'Gloo + hook':>12} {'(hook simulated)':>17} {'hook / pairwise':>16}")
    rows = []
    cmd = [sys.executable, "-m", "mccl.bench.wire_accuracy_real", "--elements", str(args.elements)]
    for n in ns:
        if args.netlab:
            placement = lab.launch_options(n)
        try:
            res = launch(cmd, n, timeout=args.timeout, env={"OMP_NUM_THREADS": "1"}, **placement)
        except LaunchError as e:
            raise SystemExit(f"mccl-bench wire-accuracy --real at N = {n}: {e}") from None
        lines = [ln for ln in res[0].output.splitlines() if ln.startswith("WIRE_ACCURACY ")]
        if not lines:
            raise SystemExit(f"mccl-bench wire-accuracy --real at N = {n}: rank 0 printed no result:\n"
                             f"{res[0].output[-2000:]}")
        row = json.loads(lines[-1].split(" ", 1)[1])
        rows.append(row)
        cell = lambda k: f"{row[k]['rel_l2']:.3e}{'=' if row[k].get('same_bits_as_simulation') else ' '}"  # noqa: E731
        print(f"{n:>3} {cell('mccl_bf16'):>19} {cell('mccl_fp16'):>19} {cell('mccl_bf16_ring'):>16} "
              f"{cell('mccl_int8'):>12} {cell('bf16_compress_hook'):>12} "
              f"{row['bf16_compress_hook']['simulated_rel_l2']:>17.3e} "
              f"{row['bf16_compress_hook']['rel_l2'] / row['mccl_bf16']['rel_l2']:>15.2f}x", flush=True)
        differ = [k for k in names[:4] if not row[k]["same_bits_as_simulation"]]
        if differ:
            print(f"# N = {n}: {', '.join(differ)} differ from the simulation", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"# wrote {args.json}")
    if any(not r[k]["same_bits_as_simulation"] for r in rows for k in names[:4]):
        raise SystemExit("mccl-bench wire-accuracy --real: a real all-reduce differs from the simulation")
    return rows
