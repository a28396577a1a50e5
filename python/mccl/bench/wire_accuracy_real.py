"""One rank of ``mccl-bench wire-accuracy --real``: real all-reduces (AVG) of
the simulation's gradient-like data with each wire, and Gloo with what
PyTorch's bf16_compress_hook does. Every rank regenerates every rank's data
(the same seed), so rank 0 can compare the result with float64 and with the
one-process simulation; it prints one line, ``WIRE_ACCURACY {json}``.

    python -m mccl.bench.wire_accuracy_real --elements 1048576   # under mccl.launch
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.distributed as dist

import mccl
from .wire_accuracy import bf16_hook_ring, errors, gradients, mccl_int8, mccl_ring, mccl_wire

# name: (pg_options of the mccl group, the simulation of what it computes)
MCCL_CONFIGS = {
    "mccl_bf16": (dict(wire_dtype="bf16", wire_reduce="pairwise"), lambda xs: mccl_wire(xs, "bf16")),
    "mccl_fp16": (dict(wire_dtype="fp16", wire_reduce="pairwise"), lambda xs: mccl_wire(xs, "fp16")),
    "mccl_bf16_ring": (dict(wire_dtype="bf16", wire_reduce="ring"), lambda xs: mccl_ring(xs, "bf16")),
    "mccl_int8": (dict(wire_dtype="int8"), mccl_int8),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, required=True)
    a = ap.parse_args(argv)
    dist.init_process_group("mccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    xs = gradients(n, a.elements, seed=n)
    got = {}
    for name, (options, _) in MCCL_CONFIGS.items():
        g = dist.new_group(backend="mccl", pg_options=mccl.Options(wire_dtype_min_bytes=0, **options))
        x = xs[rank].clone()
        dist.all_reduce(x, op=dist.ReduceOp.AVG, group=g)
        got[name] = x
        dist.destroy_process_group(g)
    gloo = dist.new_group(backend="gloo")
    h = xs[rank].to(torch.bfloat16).div_(n)  # bf16_compress_hook's arithmetic
    dist.all_reduce(h, group=gloo)
    got["bf16_compress_hook"] = h.to(torch.float32)
    # Every rank must hold the same bits (DDP replicas may not drift).
    for name, x in got.items():
        first = x.clone()
        dist.broadcast(first, 0, group=gloo)
        if not torch.equal(first.view(torch.int32), x.view(torch.int32)):
            raise SystemExit(f"wire-accuracy --real: rank {rank}'s {name} result differs from rank 0's")
    if rank == 0:
        want = torch.stack([x.double() for x in xs]).mean(0)
        row = {"n": n, "elements": a.elements, "real": True}
        for name, x in got.items():
            row[name] = errors(x, want)
        for name, (_, simulate) in MCCL_CONFIGS.items():
            row[name]["same_bits_as_simulation"] = bool(torch.equal(got[name].view(torch.int32),
                                                                    simulate(xs).view(torch.int32)))
        # Gloo's ring sums in its own order; the simulation follows MCCL's.
        row["bf16_compress_hook"]["simulated_rel_l2"] = errors(bf16_hook_ring(xs), want)["rel_l2"]
        print("WIRE_ACCURACY " + json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
