"""mccl-bench --tune: measure the cost model's parameters on this group and
cache them for rank 0 to publish when later groups are created.

  alpha, overhead  from 8-byte all_reduce by recursive doubling (log2 n
                   rounds of one message each) and by direct exchange (one
                   round, n-1 messages each way per rank)
  beta             from a large ring all_reduce, once the per-message and
                   reduction terms are taken out
  gamma            from the reduction kernel alone, on this rank

It prints the fitted model and, as a check, predicted against measured
times of every all_reduce algorithm over a range of sizes.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

import mccl

from .common import fmt_size, median


_MODEL_ENV = {"alpha_us": "MCCL_ALPHA_US", "overhead_us": "MCCL_OVERHEAD_US",
              "beta_ns_per_byte": "MCCL_BETA_NS_PER_BYTE", "gamma_ns_per_byte": "MCCL_GAMMA_NS_PER_BYTE"}


def _group_with(algo: str, model: dict | None = None):
    """A group whose all_reduce uses `algo` ("": the model's choice) and the
    built-in model, or `model`."""
    saved = {k: os.environ.pop(k, None) for k in ("MCCL_ALGO", "MCCL_TUNE_FILE", *_MODEL_ENV.values())}
    os.environ["MCCL_ALGO"] = algo
    os.environ["MCCL_TUNE_FILE"] = os.devnull
    for k, v in (model or {}).items():
        os.environ[_MODEL_ENV[k]] = repr(float(v))
    try:
        return dist.new_group(backend="mccl")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _time_allreduce(group, nbytes: int, rounds: int = 5, target: float = 0.2) -> float:
    t = torch.ones(max(1, nbytes // 4))
    for _ in range(3):
        dist.all_reduce(t, group=group)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    dist.all_reduce(t, group=group)
    one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(one, op=dist.ReduceOp.MAX, group=group)  # every rank must agree on iters
    iters = max(3, min(2000, int(target / max(float(one.item()), 1e-6))))
    samples = []
    for _ in range(rounds):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t, group=group)
        v = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX, group=group)
        samples.append(float(v.item()))
    return median(samples)


def run(args) -> dict:
    rank, n = dist.get_rank(), dist.get_world_size()
    if n < 2:
        raise SystemExit("--tune needs at least 2 ranks")
    groups = {a: _group_with(f"allreduce={a}") for a in ("recursive_doubling", "direct", "ring")}
    t_rd = _time_allreduce(groups["recursive_doubling"], 8)
    t_direct = _time_allreduce(groups["direct"], 8)
    big = args.tune_bytes
    t_ring = _time_allreduce(groups["ring"], big)
    t_ring8 = _time_allreduce(groups["ring"], 8)
    gamma = mccl._C.measure_reduce_ns_per_byte(16 << 20)
    g = torch.tensor([gamma], dtype=torch.float64)
    dist.all_reduce(g, op=dist.ReduceOp.MAX)  # the slowest rank's kernel
    gamma = float(g.item())

    # Every op pays a fixed cost c (the call, the hand-offs) on top of its
    # messages; it is the same for every algorithm, so it does not steer the
    # choice, but it must not be read as per-message latency. In
    # microseconds, with m = a + 2o the cost of one dependent message:
    #   8 B recursive doubling  c + rounds * m    = t_rd
    #   8 B ring                c + 2(n-1) * m    = t_ring8
    #   8 B direct              c + a + 2(n-1) o  = t_direct
    # Recursive doubling's dependent messages: log2(p) rounds among its p
    # leaders (the built-in model's choice, as in these groups), plus the
    # fold in and out when blocks of more than one rank fold into them. A
    # fold of g ranks costs a + g*o rather than m; taking it as m puts the
    # difference, 2(g-2)o, into c and ~2(g-2)o/(steps-rounds) into m.
    p = mccl._C.rd_leaders(8, n, mccl._C.cost_model_defaults())
    rounds = (p.bit_length() - 1) + (0 if p == n else 2)
    steps = 2 * (n - 1)
    m = max(1.0, (t_ring8 - t_rd) * 1e6 / max(1, steps - rounds))
    c = max(0.0, t_rd * 1e6 - rounds * m)
    if n > 2:
        o = max(0.5, (t_direct * 1e6 - c - m) / (2 * (n - 2)))
        a = max(1.0, m - 2 * o)
        o = min(o, (m - 1.0) / 2) if m > 2 else o
    else:  # one message either way: split it evenly
        a, o = m / 2, m / 4
    # A large ring step is latency plus wire time (its CPU overhead overlaps
    # the transfer; see csrc/core/algo/model.cc).
    wire = t_ring * 1e9 - (c + steps * a) * 1e3 - (n - 1) / n * big * gamma
    beta = max(0.01, wire / (steps / n * big))
    model = {"alpha_us": round(a, 2), "overhead_us": round(o, 2),
             "beta_ns_per_byte": round(beta, 4), "gamma_ns_per_byte": round(gamma, 4)}

    if rank == 0:
        path = mccl._C.tune_file_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"# written by mccl-bench --tune on {os.uname().nodename}, "
                    f"{time.strftime('%Y-%m-%d %H:%M')}, {n} ranks\n")
            f.write(f"# measured: 8 B all_reduce {t_rd * 1e6:.1f} us (recursive doubling), "
                    f"{t_direct * 1e6:.1f} us (direct), {t_ring8 * 1e6:.1f} us (ring); "
                    f"{fmt_size(big)} ring {t_ring * 1e3:.2f} ms; fixed cost per op {c:.1f} us\n")
            for k, v in model.items():
                f.write(f"{k}={v}\n")
        print(f"# cost model for {n} ranks, written to {path}:")
        for k, v in model.items():
            print(f"#   {k:<18} {v}")
        print(f"#   (fixed cost per op, the same for every algorithm: {c:.1f} us; added to predictions below)")
    # Check: predicted against measured, per algorithm and size.
    checks = []
    sizes = [8, 64 << 10, 1 << 20, big]
    dist.barrier()
    for algo, grp in groups.items():
        for s in sizes:
            if algo == "direct" and s > (1 << 20):
                continue
            t = _time_allreduce(grp, s, rounds=3)
            checks.append((algo, s, t, c * 1e-6 + mccl._C.predict_seconds("allreduce", algo, s, n, model)))
    # Small sizes under the fitted model: Bruck (in the radix this model
    # picks) and whatever a group with this model chooses, so a fleet sees
    # whether the choice holds there.
    fitted = {"bruck": _group_with("allreduce=bruck", model), "auto": _group_with("", model)}
    for name, grp in fitted.items():
        for s in (8, 64 << 10):
            if name == "bruck":
                algo, label = "bruck", f"bruck (radix {mccl._C.bruck_radix(s, n, model)})"
            else:
                label = "auto: " + mccl._C.chosen_algorithm("allreduce", s, n, model)
                algo = label.split()[1]
            t = _time_allreduce(grp, s, rounds=3)
            checks.append((label, s, t, c * 1e-6 + mccl._C.predict_seconds("allreduce", algo, s, n, model)))
    if rank == 0:
        print(f"{'algorithm':>28} {'size':>10} {'measured(us)':>13} {'predicted(us)':>14}")
        for algo, s, t, pr in checks:
            print(f"{algo:>28} {fmt_size(s):>10} {t * 1e6:>13.1f} {pr * 1e6:>14.1f}")
    for grp in list(groups.values()) + list(fitted.values()):
        dist.destroy_process_group(grp)
    return model
