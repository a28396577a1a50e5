"""The collective sweep: nccl-tests-style tables, mccl and Gloo interleaved."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from .common import BUSBW, Progress, destroy_gloo, fmt_size, median, metadata, write_json


def _buffers(op: str, nbytes: int, world: int, rank: int, dtype: torch.dtype, device: str):
    """Tensors for one op at `nbytes` (nccl-tests size conventions)."""
    es = torch.tensor([], dtype=dtype).element_size()
    count = max(1, nbytes // es)
    mk = lambda n: torch.full((n,), float(rank + 1), dtype=dtype, device=device)  # noqa: E731
    if op in ("all_gather", "reduce_scatter"):
        per = max(1, count // world)
        return {"small": mk(per), "big": mk(per * world)}
    if op == "all_to_all":
        per = max(1, count // world)
        return {"in": mk(per * world), "out": mk(per * world)}
    return {"buf": mk(count), "recv": mk(count)}


def _runner(op: str, b: dict, group, world: int, rank: int):
    if op == "all_reduce":
        return lambda: dist.all_reduce(b["buf"], group=group)
    if op == "broadcast":
        return lambda: dist.broadcast(b["buf"], src=dist.get_global_rank(group, 0) if group else 0, group=group)
    if op == "reduce":
        return lambda: dist.reduce(b["buf"], dst=dist.get_global_rank(group, 0) if group else 0, group=group)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(b["big"], b["small"], group=group)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(b["small"], b["big"], group=group)
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(b["out"], b["in"], group=group)
    if op == "sendrecv":
        right, left = (rank + 1) % world, (rank - 1) % world

        def ring():
            if world == 1:
                return
            reqs = [dist.isend(b["buf"], dist.get_global_rank(group, right) if group else right, group=group),
                    dist.irecv(b["recv"], dist.get_global_rank(group, left) if group else left, group=group)]
            for q in reqs:
                q.wait()
        return ring
    raise ValueError(op)


def _bf16_hook_runner(buf: torch.Tensor, group, world: int):
    """torch.distributed.algorithms.ddp_comm_hooks.default_hooks.
    bf16_compress_hook's work on one bucket: a bfloat16 copy divided by the
    world size, all-reduced (summed in bfloat16 at every hop), copied back."""
    def hook():
        c = buf.to(torch.bfloat16).div_(world)
        dist.all_reduce(c, group=group)
        buf.copy_(c)
    return hook


def _sync():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # device ops complete on the stream


def _time(fn, iters: int, group) -> tuple[float, float]:
    """Seconds per op: the slowest rank's average over `iters` blocking calls
    (for device tensors, until the device has the results); and the CPU
    seconds per op of all ranks together (each process's user and system
    time over its timed loop, every thread included)."""
    _sync()
    dist.barrier(group=group)
    c0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync()
    t1 = time.perf_counter()
    cpu = time.process_time() - c0
    dt = torch.tensor([(t1 - t0) / iters], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
    c = torch.tensor([cpu / iters], dtype=torch.float64)
    dist.all_reduce(c, group=group)
    return float(dt.item()), float(c.item())


def _group_with(var: str, value: str):
    """A new mccl group made with `var`=`value` (a group's settings are read
    from the environment when it is made)."""
    before = os.environ.get(var)
    os.environ[var] = value
    try:
        return dist.new_group(backend="mccl")
    finally:
        if before is None:
            os.environ.pop(var)
        else:
            os.environ[var] = before


# The collectives whose algorithm MCCL chooses per buffer.
_CHOSEN = ("all_reduce", "broadcast", "reduce")


def _mccl_algorithm(op: str, buf: torch.Tensor, group) -> str:
    """What an mccl group runs for `op` (one of _CHOSEN) on `buf`
    (all_reduce and reduce with SUM): the algorithm its agreed model and
    settings choose or the wire algorithm that replaces it ("ring_wire
    (bf16)"), and the pieces a large all_reduce is cut into."""
    pg = dist.distributed_c10d._get_default_group() if group is dist.group.WORLD else group
    return pg._get_backend(torch.device("cpu"))._algorithm_for(op, buf)


def run(args) -> list[dict]:
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"mccl": dist.group.WORLD}
    modes = [m for m in getattr(args, "wire_security", "").split(",") if m]
    for mode in modes:
        if mode not in ("integrity", "encrypt"):
            raise SystemExit(f"mccl-bench: --wire-security takes integrity and/or encrypt, not {mode!r}")
        groups[f"mccl+{mode}"] = _group_with("MCCL_WIRE_SECURITY", mode)
    wire = [m for m in getattr(args, "wire_dtype", "").split(",") if m]
    for w in wire:
        if w not in ("bf16", "fp16", "int8"):
            raise SystemExit(f"mccl-bench: --wire-dtype takes bf16, fp16 and/or int8, not {w!r}")
        groups[f"mccl+{w}"] = _group_with("MCCL_WIRE_DTYPE", w)
    if args.vs == "gloo":
        groups["gloo"] = dist.new_group(backend="gloo")
    if getattr(args, "bf16_hook", False):
        if args.ops != ["all_reduce"] or args.vs != "gloo":
            raise SystemExit("mccl-bench: --bf16-hook times all_reduce beside Gloo (--ops all_reduce --vs gloo)")
        groups["gloo+bf16hook"] = groups["gloo"]
    dtype = getattr(torch, args.dtype)
    records = []
    plan = [(op, s) for op in args.ops for s in args.sizes]
    prog = Progress(len(plan), enabled=rank == 0)
    if rank == 0:
        print(f"# mccl-bench: {world} ranks, dtype {args.dtype}, device {args.device}, "
              f"{args.rounds} interleaved rounds, median reported", flush=True)
    goodput = float(os.environ.get("MCCL_BENCH_GOODPUT_GBPS", "0")) or None
    if rank == 0 and goodput:
        print(f"# TCP goodput of the slowest ring link: {goodput:.4f} GB/s (busbw % is of this)", flush=True)
    current = None
    for op, size in plan:
        if op != current and rank == 0:
            _header(op, list(groups), goodput)
        current = op
        times = {name: [] for name in groups}
        cpus = {name: [] for name in groups}
        runners = {}
        algorithms = {}
        for name, g in groups.items():
            b = _buffers(op, size, world, rank, dtype, args.device)
            if name.startswith("mccl") and op in _CHOSEN:
                algorithms[name] = _mccl_algorithm(op, b["buf"], g)
            runners[name] = _runner(op, b, g, world, rank)
            if name == "gloo+bf16hook":
                runners[name] = _bf16_hook_runner(b["buf"], g, world)
            # Warm up and pick an iteration count that fills ~target seconds.
            warm, _ = _time(runners[name], 2, g)
            runners[name + ":iters"] = max(args.min_iters, min(args.max_iters, int(args.target / max(warm, 1e-6))))
        for rnd in range(args.rounds):
            order = list(groups) if rnd % 2 == 0 else list(reversed(groups))
            for name in order:
                t, c = _time(runners[name], runners[name + ":iters"], groups[name])
                times[name].append(t)
                cpus[name].append(c)
        row = {"op": op, "bytes": size, "world": world}
        if goodput:
            row["goodput_GBps"] = goodput
        for name in groups:
            t = median(times[name])
            algbw = size / t / 1e9
            # CPU: all ranks' CPU time per op (median over rounds), and the
            # cores that kept busy: that over the time per op (against the
            # host's cores when the ranks share one, as in a network lab).
            cpu = median(cpus[name])
            row[name] = {"time_us": t * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * BUSBW[op](world),
                         "rounds_us": [x * 1e6 for x in times[name]], "iters": runners[name + ":iters"],
                         "cpu_us_per_op": cpu * 1e6, "cpu_rounds_us": [c * 1e6 for c in cpus[name]],
                         "cores_busy": cpu / t}
        for name, algorithm in algorithms.items():
            row[name]["algorithm"] = algorithm
        records.append(row)
        if rank == 0:
            _row(row, list(groups))
            if getattr(args, "cpu", False):
                _cpu_row(row, list(groups))
        prog.step(f"{op} {fmt_size(size)}")
    extra = {"dtype": args.dtype, "device": args.device, "rounds": args.rounds}
    if getattr(args, "startup", None):
        from .startup import _max_over_ranks, resources
        extra["startup"] = dict(args.startup, resources_after_sweep_max=_max_over_ranks(resources()))
        if rank == 0:
            r = extra["startup"]["resources_after_sweep_max"]
            print(f"# per rank after the sweep (largest over ranks, Gloo's group included): {r['threads']:.0f} "
                  f"threads, {r['sockets']:.0f} sockets, {r['rss_MB']:.0f} MB resident, "
                  f"peak {r['hwm_MB']:.0f} MB", flush=True)
    if "gloo" in groups:
        destroy_gloo(groups["gloo"])
    for name, g in groups.items():
        if name.startswith("mccl+") and g is not dist.group.WORLD:
            dist.destroy_process_group(g)
    if rank == 0 and args.json:
        write_json(args.json, metadata(extra), records)
        print(f"# wrote {args.json}", flush=True)
    return records


def _cpu_row(row: dict, names: list[str]):
    cells = ", ".join(f"{n} {row[n]['cpu_us_per_op']:,.1f} µs ({row[n]['cores_busy']:.1f} cores busy)"
                      for n in names)
    print(f"{'':>10}   CPU per op, all ranks: {cells}", flush=True)


def _ratios(names: list[str]) -> list[tuple[str, str, str]]:
    """(label, numerator, denominator) of the busbw ratios a row shows:
    mccl against Gloo, and each sealed or compressed mccl group against the
    plain one (busbw counts float32 bytes: effective for a 16-bit wire)."""
    out = [("mccl/gloo", "mccl", "gloo")] if "gloo" in names else []
    for n in names:
        if n.startswith("mccl+"):
            mode = n[5:]
            base = "off" if mode in ("integrity", "encrypt") else "fp32"
            out.append((f"{mode}/{base}", n, "mccl"))
    if "gloo+bf16hook" in names:
        out += [(f"{n[5:]}/g+hook", n, "gloo+bf16hook") for n in names
                if n.startswith("mccl+") and n[5:] in ("bf16", "fp16", "int8")]
    return out


def _header(op: str, names: list[str], goodput: float | None = None):
    pct = f" {'%goodput':>9}" if goodput else ""
    w = max([15] + [len(n) + 9 for n in names])
    cols = "".join(f" {n + ' time(us)':>{w}} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}{pct}" for n in names)
    ratio = "".join(f" {label:>14}" for label, _, _ in _ratios(names))
    algo = "  mccl algorithm" if op in _CHOSEN else ""
    print(f"\n## {op}\n{'size':>10}{cols}{ratio}{algo}", flush=True)


def _row(row: dict, names: list[str]):
    g = row.get("goodput_GBps")
    w = max([15] + [len(n) + 9 for n in names])
    cols = "".join(f" {row[n]['time_us']:>{w}.1f} {row[n]['algbw_GBps']:>12.3f} {row[n]['busbw_GBps']:>12.3f}"
                   + (f" {100 * row[n]['busbw_GBps'] / g:>8.1f}%" if g else "")
                   for n in names)
    ratio = "".join(f" {row[a]['busbw_GBps'] / max(row[b]['busbw_GBps'], 1e-12):>13.3f}x"
                    for _, a, b in _ratios(names))
    base = row.get("mccl", {}).get("algorithm")
    algo = f"  {base}" if base else ""
    # The other mccl groups' where it differs (a wire dtype's algorithm).
    algo += "".join(f"; {n[5:]}: {row[n]['algorithm']}" for n in names
                    if n.startswith("mccl+") and row[n].get("algorithm", base) != base)
    print(f"{fmt_size(row['bytes']):>10}{cols}{ratio}{algo}", flush=True)
