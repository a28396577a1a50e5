"""mccl-bench matmul: dense matrix-product throughput of this machine's
device, for comparing a fleet member with a datacentre GPU (mccl plan uses
the ratio). FP32 (full precision), TF32 (CUDA: tensor cores on FP32 data;
elsewhere the FP32 path) and BF16; TFLOP/s = 2 n^3 / time, median of
--repeats timed runs after a warm-up."""

from __future__ import annotations

import json
import statistics
import time

import torch


def _sync(dev: torch.device):
    if dev.type == "cuda":
        torch.cuda.synchronize()
    elif dev.type == "mps":
        torch.mps.synchronize()


def measure(device: str = "cpu", n: int = 0, repeats: int = 5, seconds: float = 0.5) -> list[dict]:
    dev = torch.device(device)
    if n <= 0:
        n = 8192 if dev.type == "cuda" else 4096 if dev.type == "mps" else 1024
    rows = []
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("bf16", torch.bfloat16, False)):
        prev = torch.backends.cuda.matmul.allow_tf32
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            torch.mm(a, b)
            _sync(dev)
            t0 = time.perf_counter()
            torch.mm(a, b)
            _sync(dev)
            one = max(time.perf_counter() - t0, 1e-6)
            iters = max(1, int(seconds / one))
            times = []
            for _ in range(repeats):
                _sync(dev)
                t0 = time.perf_counter()
                for _ in range(iters):
                    torch.mm(a, b)
                _sync(dev)
                times.append((time.perf_counter() - t0) / iters)
            t = statistics.median(times)
            rows.append({"dtype": name, "n": n, "seconds": t, "tflops": 2 * n ** 3 / t / 1e12,
                         "tensor_cores": dev.type == "cuda" and name != "fp32",
                         "note": "" if dev.type == "cuda" or name != "tf32" else "no TF32 mode here: FP32 path"})
        finally:
            if dev.type == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = prev
    return rows


def run(args) -> list[dict]:
    rows = measure(args.device, args.n, args.repeats)
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"# mccl-bench matmul on {name} (torch {torch.__version__}, {torch.get_num_threads()} CPU threads)")
    print(f"{'dtype':>6} {'n':>6} {'ms/product':>11} {'TFLOP/s':>9}")
    for r in rows:
        print(f"{r['dtype']:>6} {r['n']:>6} {r['seconds'] * 1e3:>11.3f} {r['tflops']:>9.2f} {r['note']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "rows": rows}, f, indent=1)
        print(f"# wrote {args.json}")
    return rows
