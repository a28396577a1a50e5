"""Helpers for worker scripts: group setup, deterministic per-rank data and
float64 / exact-integer references."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import mccl  # noqa: F401  registers "mccl"

ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
OPS = {
    "SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "PRODUCT": dist.ReduceOp.PRODUCT,
    "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX, "BAND": dist.ReduceOp.BAND,
    "BOR": dist.ReduceOp.BOR, "BXOR": dist.ReduceOp.BXOR,
}
PREMUL = 0.5
COUNTS = [0, 1, 2, 13, 1031]


def init(backend: str = "mccl", **kw):
    torch.set_num_threads(1)
    dist.init_process_group(backend, **kw)
    return dist.get_rank(), dist.get_world_size()


def done():
    dist.destroy_process_group()
    print("WORKER OK", flush=True)


def supported(dtype: torch.dtype, op: str) -> bool:
    name = str(dtype).replace("torch.", "")
    return mccl.reduce_supported(name, op)


def value(dtype, op, rank, n, salt=0) -> torch.Tensor:
    """Rank ``rank``'s input: ``n`` small integers (exact in every dtype)."""
    i = torch.arange(n, dtype=torch.int64)
    h = (rank + 1) * 7919 + i * 104729 + salt * 31
    if dtype == torch.bool:
        return ((rank * 5 + i * 3 + salt) % 4 == 0)
    if op == "PRODUCT":
        k = h % 3
        v = torch.where(k == 0, 1, torch.where(k == 1, -1, 2))
    elif op in ("BAND", "BOR", "BXOR"):
        v = h % 97
    elif dtype == torch.uint8:
        v = h % 13
    else:
        v = h % 13 - 6
    return v.to(dtype)


def reference(dtype, op, world, n, salt=0, premul=PREMUL) -> torch.Tensor:
    """The reduction over ranks 0..world-1 in float64 (floats) or int64 (integers)."""
    ins = [value(dtype, op, r, n, salt) for r in range(world)]
    if dtype == torch.bool:
        acc = ins[0].clone()
        for x in ins[1:]:
            if op in ("SUM", "MAX", "BOR"):
                acc = acc | x
            elif op == "BXOR":
                acc = acc ^ x
            else:
                acc = acc & x
        return acc
    wide = torch.float64 if dtype in FLOATS else torch.int64
    xs = [x.to(wide) for x in ins]
    if op == "PREMUL_SUM":
        xs = [x * premul for x in xs]
    acc = xs[0].clone()
    for x in xs[1:]:
        if op in ("SUM", "AVG", "PREMUL_SUM"):
            acc = acc + x
        elif op == "PRODUCT":
            acc = acc * x
        elif op == "MIN":
            acc = torch.minimum(acc, x)
        elif op == "MAX":
            acc = torch.maximum(acc, x)
        elif op == "BAND":
            acc = acc & x
        elif op == "BOR":
            acc = acc | x
        elif op == "BXOR":
            acc = acc ^ x
    if op == "AVG":
        acc = acc / world if wide == torch.float64 else torch.div(acc, world, rounding_mode="trunc")
    return acc.to(dtype)


def assert_close(got: torch.Tensor, want: torch.Tensor, op: str, what: str):
    """Exact, except where the dtype must round (AVG, PREMUL_SUM on floats)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape, want.shape)
    if op in ("AVG", "PREMUL_SUM") and got.dtype in FLOATS:
        tol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1e-2}[got.dtype]
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(got, want)
    if not ok:
        diff = (got.double() - want.double()).abs() if got.dtype != torch.bool else (got != want)
        idx = int(diff.argmax())
        raise AssertionError(f"{what}: mismatch at {idx}: got {got.flatten()[idx].item()} "
                             f"want {want.flatten()[idx].item()}")


def reduce_op(name: str):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL)
    return OPS[name]


def log(*a):
    print(f"[rank {os.environ.get('RANK')}]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------ device shim
# MCCL_TEST_DEVICE=cuda (or a comma list, one per rank: "cuda:0,cpu,...")
# runs a worker's mccl calls on device tensors: each call gets device copies
# of its tensor arguments and the results are copied back, so the worker's
# CPU-side references and checks stay as they are. Gloo groups are left alone.

def _test_device():
    spec = os.environ.get("MCCL_TEST_DEVICE", "")
    if not spec:
        return None
    parts = spec.split(",")
    rank = int(os.environ.get("RANK", "0"))
    d = parts[rank % len(parts)] if len(parts) > 1 else parts[0]
    return None if d == "cpu" else torch.device(d)


def _install_device_shim(dev):
    import contextlib
    import functools

    deferred = []  # inside _coalescing_manager: copy back at its wait()

    def to_dev(x, pairs):
        if isinstance(x, torch.Tensor):
            y = x.to(dev)
            pairs.append((x, y))
            return y
        if isinstance(x, (list, tuple)) and x and all(isinstance(t, torch.Tensor) for t in x):
            return type(x)(to_dev(t, pairs) for t in x)
        if isinstance(x, list) and x and all(isinstance(t, list) for t in x):
            return [to_dev(t, pairs) for t in x]
        return x

    def back(pairs):
        for cpu_t, dev_t in pairs:
            cpu_t.copy_(dev_t.cpu())

    class DeviceWork:
        def __init__(self, work, pairs):
            self.work, self.pairs = work, pairs

        def wait(self, *a):
            r = self.work.wait(*a)
            back(self.pairs)
            return r

        def __getattr__(self, name):
            return getattr(self.work, name)

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            group = kwargs.get("group")
            if group is not None and dist.get_backend(group) != "mccl":
                return fn(*args, **kwargs)
            pairs = []
            args = [to_dev(a, pairs) for a in args]
            kwargs = {k: to_dev(v, pairs) for k, v in kwargs.items()}
            out = fn(*args, **kwargs)
            if deferred:
                deferred[-1].extend(pairs)
                return out
            if kwargs.get("async_op") or fn.__name__ in ("isend", "irecv"):
                return DeviceWork(out, pairs)
            back(pairs)
            return out
        return inner

    class CoalescedProxy:
        def __init__(self, cm, pairs):
            self.cm, self.pairs = cm, pairs

        def wait(self):
            self.cm.wait()
            back(self.pairs)

    orig_cm = dist._coalescing_manager

    @contextlib.contextmanager
    def coalescing(*a, **k):
        pairs = []
        deferred.append(pairs)
        try:
            with orig_cm(*a, **k) as cm:
                yield CoalescedProxy(cm, pairs)
        finally:
            deferred.pop()
        if not k.get("async_ops", a[2] if len(a) > 2 else False):
            back(pairs)

    dist._coalescing_manager = coalescing
    for name in ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                 "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                 "gather", "scatter", "send", "recv", "isend", "irecv", "all_reduce_coalesced"):
        if hasattr(dist, name):
            setattr(dist, name, wrap(getattr(dist, name)))


TEST_DEVICE = _test_device()
if TEST_DEVICE is not None:
    if TEST_DEVICE.type == "cuda":
        torch.cuda.set_device(TEST_DEVICE.index or 0)
    _install_device_shim(TEST_DEVICE)
