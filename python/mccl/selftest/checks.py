"""The collective checks of ``mccl selftest``: every collective on the
device under test, for every dtype the device has, against exact references
computed on the CPU; the stream-order traps; async ops.

Every rank's data is a deterministic function of (rank, count, salt) made of
small integers, so every rank can compute every other rank's input and the
references are exact in every dtype."""

from __future__ import annotations

import torch
import torch.distributed as dist

COUNTS = (0, 1, 13, 1031)
CANDIDATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                    torch.int32, torch.int16, torch.int8, torch.uint8)


def device_dtypes(dev: torch.device) -> list[torch.dtype]:
    """The candidate dtypes the device can hold (MPS has no float64)."""
    out = []
    for dt in CANDIDATE_DTYPES:
        try:
            torch.zeros(2, dtype=dt, device=dev).add_(1)
        except (RuntimeError, TypeError):
            continue
        out.append(dt)
    return out


def data(rank: int, n: int, salt: int, dtype: torch.dtype, world: int) -> torch.Tensor:
    """Rank ``rank``'s input on the CPU: small integers, distinct per rank,
    whose sums over ``world`` ranks stay within 120 (exact in bfloat16, no
    overflow in int8 or uint8)."""
    k = max(1, min(11, 120 // world // 2))
    i = torch.arange(n, dtype=torch.int64)
    v = (i * 7 + rank * 13 + salt * 5) % (2 * k + 1)
    if dtype != torch.uint8:
        v = v - k
    return v.to(dtype)


def reference(op: str, world: int, n: int, salt: int, dtype: torch.dtype) -> torch.Tensor:
    stack = torch.stack([data(r, n, salt, dtype, world).to(torch.float64) for r in range(world)])
    if op == "MAX":
        return stack.max(0).values
    if op == "MIN":
        return stack.min(0).values
    if op == "AVG":
        return stack.mean(0)
    return stack.sum(0)


def same(got: torch.Tensor, want: torch.Tensor, op: str = "SUM") -> bool:
    got = got.detach().to("cpu", torch.float64)
    want = want.to(torch.float64)
    if got.shape != want.shape:
        return False
    if op == "AVG":  # one rounding of an exact sum
        return torch.allclose(got, want, rtol=1e-2, atol=1e-2)
    return torch.equal(got, want)


class Checks:
    """Runs named checks, recording failures instead of stopping."""

    def __init__(self, rank: int, world: int, dev: torch.device, breaks: str = ""):
        self.rank, self.world, self.dev = rank, world, dev
        self.results: list[dict] = []
        self.breaks = breaks  # a fault to inject (tests of the self-test)

    def run(self, name: str, fn) -> None:
        self._wrong: list[str] = []
        try:
            detail = fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
            self._wrong.append(f"{type(e).__name__}: {e}")
        if self._wrong:
            more = f" (and {len(self._wrong) - 1} more)" if len(self._wrong) > 1 else ""
            self.results.append({"check": name, "ok": False, "detail": self._wrong[0] + more})
        else:
            self.results.append({"check": name, "ok": True, "detail": detail or ""})

    def on_dev(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.dev)

    def expect(self, ok: bool, what: str) -> None:
        """Records a wrong result and goes on, so that this rank still calls
        the check's remaining collectives and the ranks stay in step."""
        if not ok:
            self._wrong.append(f"wrong result: {what}")

    def maybe_break(self, name: str, t: torch.Tensor) -> None:
        if self.breaks == name and self.rank == self.world - 1 and t.numel() > 0:
            t.view(-1)[0] += 1  # a wrong result the check must catch


def collective_checks(c: Checks, quick: bool) -> None:
    r, w = c.rank, c.world
    reduce_ops = {"SUM": dist.ReduceOp.SUM, "MAX": dist.ReduceOp.MAX, "MIN": dist.ReduceOp.MIN,
                  "AVG": dist.ReduceOp.AVG}
    counts = COUNTS[:3] if quick else COUNTS
    for dt in device_dtypes(c.dev):
        name = str(dt).replace("torch.", "")
        floating = dt.is_floating_point

        def all_reduce(dt=dt, floating=floating):
            for op, rop in reduce_ops.items():
                if op == "AVG" and not floating:
                    continue
                for n in counts:
                    x = c.on_dev(data(r, n, 1, dt, w))
                    dist.all_reduce(x, op=rop)
                    c.maybe_break("all_reduce", x)
                    c.expect(same(x, reference(op, w, n, 1, dt), op), f"all_reduce {op} n={n}")

        def broadcast_reduce(dt=dt):
            for n in counts:
                for root in sorted({0, w - 1}):
                    x = c.on_dev(data(r, n, 2, dt, w))
                    dist.broadcast(x, src=root)
                    c.expect(same(x, data(root, n, 2, dt, w).double()), f"broadcast root={root} n={n}")
                    y = c.on_dev(data(r, n, 3, dt, w))
                    dist.reduce(y, dst=root)
                    if r == root:
                        c.expect(same(y, reference("SUM", w, n, 3, dt)), f"reduce root={root} n={n}")

        def gathers(dt=dt):
            for n in counts:
                mine = c.on_dev(data(r, n, 4, dt, w))
                outs = [c.on_dev(torch.zeros(n, dtype=dt)) for _ in range(w)]
                dist.all_gather(outs, mine)
                for k in range(w):
                    c.expect(same(outs[k], data(k, n, 4, dt, w).double()), f"all_gather n={n} from {k}")
                flat = c.on_dev(torch.zeros(w * n, dtype=dt))
                dist.all_gather_into_tensor(flat, mine)
                want = torch.cat([data(k, n, 4, dt, w) for k in range(w)]).double()
                c.expect(same(flat, want), f"all_gather_into_tensor n={n}")
                g = [c.on_dev(torch.zeros(n, dtype=dt)) for _ in range(w)] if r == 0 else None
                dist.gather(mine, g, dst=0)
                if r == 0:
                    for k in range(w):
                        c.expect(same(g[k], data(k, n, 4, dt, w).double()), f"gather n={n} from {k}")
                got = c.on_dev(torch.zeros(n, dtype=dt))
                parts = [c.on_dev(data(100 + k, n, 5, dt, w)) for k in range(w)] if r == 0 else None
                dist.scatter(got, parts, src=0)
                c.expect(same(got, data(100 + r, n, 5, dt, w).double()), f"scatter n={n}")

        def scatters(dt=dt):
            for n in counts:
                full = c.on_dev(data(r, n * w, 6, dt, w))
                out = c.on_dev(torch.zeros(n, dtype=dt))
                dist.reduce_scatter_tensor(out, full)
                want = reference("SUM", w, n * w, 6, dt)[r * n:(r + 1) * n]
                c.expect(same(out, want), f"reduce_scatter_tensor n={n}")
                a2a_in = c.on_dev(data(r, n * w, 7, dt, w))
                a2a_out = c.on_dev(torch.zeros(n * w, dtype=dt))
                dist.all_to_all_single(a2a_out, a2a_in)
                want = torch.cat([data(k, n * w, 7, dt, w)[r * n:(r + 1) * n] for k in range(w)]).double()
                c.expect(same(a2a_out, want), f"all_to_all_single n={n}")

        def point_to_point(dt=dt):
            n = counts[-1]
            x = c.on_dev(data(r, n, 8, dt, w))
            y = c.on_dev(torch.zeros(n, dtype=dt))
            ops = [dist.P2POp(dist.isend, x, (r + 1) % w), dist.P2POp(dist.irecv, y, (r - 1) % w)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            c.expect(same(y, data((r - 1) % w, n, 8, dt, w).double()), "send/recv ring")

        c.run(f"all_reduce {name}", all_reduce)
        c.run(f"broadcast, reduce {name}", broadcast_reduce)
        c.run(f"all_gather, gather, scatter {name}", gathers)
        c.run(f"reduce_scatter, all_to_all {name}", scatters)
        c.run(f"send/recv {name}", point_to_point)
    c.run("barrier", lambda: dist.barrier())


def stream_order_checks(c: Checks) -> None:
    """The traps of a device with queues: no synchronisation anywhere."""
    r, w, dev = c.rank, c.world, c.dev
    n = 1 << 18
    tri = float(w * (w + 1) // 2)

    def kernel_writes_input():
        # A kernel that writes the input is queued right before the call.
        x = torch.zeros(n, device=dev)
        x.add_(float(r + 1)).mul_(3.0)
        dist.all_reduce(x)
        c.maybe_break("trap", x)
        c.expect(bool((x.cpu() == 3.0 * tri).all()), "all_reduce saw its input before the kernel wrote it")

    def kernel_reads_output():
        # A kernel reads the output right after the call returns.
        x = torch.full((n,), float(r + 1), device=dev)
        dist.all_reduce(x)
        y = x * 2.0
        c.expect(bool((y.cpu() == 2.0 * tri).all()), "a kernel after the call read a stale output")

    def async_ops():
        # Many async ops in flight, inputs written just before, kernels between.
        xs, works = [], []
        for i in range(8):
            x = torch.empty(1031 * (i + 1), device=dev)
            x.fill_(float(r + i))
            works.append(dist.all_reduce(x, async_op=True))
            xs.append((x, i))
            _ = torch.ones(64, device=dev) * i  # unrelated work on the queue
        futs = [wk.get_future() for wk in works[:4]]
        for wk in works[4:]:
            wk.wait()
        torch.futures.wait_all(futs)
        for x, i in xs:
            want = float(w * (w - 1) // 2 + w * i)
            c.expect(bool((x.cpu() == want).all()), f"async all_reduce #{i}")

    def callbacks_run_kernels():
        # then() callbacks that run kernels on the results (as DDP comm hooks
        # do), while this thread keeps queueing kernels. On MPS they must run
        # on this thread or on an MCCL runner thread once this one waits:
        # PyTorch's MPS is unsafe from two threads at once (docs/mps.md).
        import threading

        import mccl
        me, where = threading.get_native_id(), []

        def double(f):
            where.append("issuer" if threading.get_native_id() == me else
                         "runner thread" if mccl._C._on_callback_thread() else "other MCCL thread")
            return f.value()[0] * 2.0

        chained = []
        for i in range(4):
            x = torch.full((4099,), float(r + i), device=dev)
            chained.append((dist.all_reduce(x, async_op=True).get_future().then(double), i))
            for _ in range(20):
                _ = torch.ones(1024, device=dev) * i  # this thread keeps the device busy
        for f, i in chained:
            want = 2.0 * float(w * (w - 1) // 2 + w * i)
            c.expect(bool((f.wait().cpu() == want).all()), f"then() callback result #{i}")
        if dev.type == "mps" or mccl._C._mps_port_stats() is not None:  # a Mac, or the fake Metal port
            c.expect("other MCCL thread" not in where, f"MPS callbacks ran on {where}")
        return ", ".join(sorted(set(where)))

    c.run("trap: kernel writes the input right before the call", kernel_writes_input)
    c.run("trap: kernel reads the output right after the call", kernel_reads_output)
    c.run("async ops in flight (Work.wait and Future)", async_ops)
    c.run("Future callbacks that run kernels", callbacks_run_kernels)
