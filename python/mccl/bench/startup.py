"""Start-up cost and per-rank resources, for the collective sweep.

Start-up is measured from the moment the *last* rank calls
``init_process_group`` to the moment the last rank returns from it (ranks
on one machine or one network lab share a clock): ranks launched late do
not count against the backend. The first collective (an 8-byte all_reduce,
which may open connections lazily) is timed the same way. Gloo's figures
come from ``new_group(backend="gloo")`` over the same ranks, started
together after a barrier, beside ``new_group(backend="mccl")`` timed the same
way. The TCPStore rendezvous (every rank connected to rank 0's store) is
timed apart, before init_process_group: a client that arrives before the
store's server retries on a back-off, which can add hundreds of milliseconds
that no backend controls (under torchrun the agent's store exists already).
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist


def _span(starts_ends: tuple[float, float], group=None) -> float:
    """Seconds from the last start to the last end over the group."""
    t = torch.tensor([starts_ends[0], starts_ends[1]], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t[1] - t[0])


def timed_init(backend: str = "mccl"):
    """Creates the default group and runs an 8-byte all_reduce; returns this
    rank's wall-clock (start, end) of the rendezvous, of init_process_group
    and of the all_reduce, to be reduced with report() once a group exists.

    Where the launcher did not create the store (torchrun's agent does:
    TORCHELASTIC_USE_AGENT_STORE), this rank creates the TCPStore itself and
    waits until every rank has reached it (the rendezvous), so that
    init_process_group is then timed from ranks that all start together; a
    late rank's launch does not count against it."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    t0 = time.time()
    kw = {}
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        from datetime import timedelta
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                              is_master=rank == 0, timeout=timedelta(seconds=600), wait_for_workers=False)
        store.add("mccl-bench/arrived", 1)
        while store.add("mccl-bench/arrived", 0) < world:
            time.sleep(0.001)
        kw = {"store": store, "rank": rank, "world_size": world}
    t1 = time.time()
    dist.init_process_group(backend, **kw)
    t2 = time.time()
    dist.all_reduce(torch.zeros(2, dtype=torch.float32))
    t3 = time.time()
    return (t0, t1), (t1, t2), (t2, t3)


def resources() -> dict:
    """This process's threads, sockets, and resident memory (Linux /proc)."""
    out = {"threads": 0, "sockets": 0, "rss_MB": 0.0, "hwm_MB": 0.0}
    try:
        out["threads"] = len(os.listdir("/proc/self/task"))
        fds = os.listdir("/proc/self/fd")
        socks = 0
        for fd in fds:
            try:
                socks += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        out["sockets"] = socks
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_MB"] = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    out["hwm_MB"] = int(line.split()[1]) / 1024
    except OSError:
        pass  # not Linux: zeros, reported as such
    return out


def _max_over_ranks(d: dict) -> dict:
    keys = sorted(d)
    t = torch.tensor([float(d[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {k: float(v) for k, v in zip(keys, t.tolist())}


def _timed_group(backend: str, destroy) -> tuple[float, float]:
    """Seconds to make a new group of every rank (started together) and to
    run its first 8-byte all_reduce, the slowest rank's each; destroys it."""
    dist.barrier()
    t0 = time.time()
    g = dist.new_group(backend=backend)
    t1 = time.time()
    dist.all_reduce(torch.zeros(2, dtype=torch.float32), group=g)
    t2 = time.time()
    spans = _span((t0, t1)), _span((t1, t2))
    destroy(g)
    return spans


def report(rendezvous_span, init_span, first_span) -> dict:
    """Reduces the start-up spans over all ranks, times Gloo's group
    creation and first all_reduce likewise, and gathers the largest per-rank
    resources; rank 0 prints one block. Every rank must call it."""
    out = {"rendezvous_s": _span(rendezvous_span), "mccl_init_s": _span(init_span),
           "mccl_first_allreduce_s": _span(first_span)}
    out["mccl_resources_max"] = _max_over_ranks(resources())
    from .common import destroy_gloo
    mccl_spans = _timed_group("mccl", dist.destroy_process_group)
    out["mccl_new_group_s"], out["mccl_new_group_first_allreduce_s"] = mccl_spans
    out["gloo_new_group_s"], out["gloo_first_allreduce_s"] = _timed_group("gloo", destroy_gloo)
    if dist.get_rank() == 0:
        r = out["mccl_resources_max"]
        ms = {k: v * 1e3 for k, v in out.items() if k.endswith("_s")}
        print(f"# start-up, {dist.get_world_size()} ranks (last rank's call to last return): TCPStore "
              f"rendezvous {ms['rendezvous_s']:.0f} ms; mccl init_process_group {ms['mccl_init_s']:.0f} ms, "
              f"first all_reduce {ms['mccl_first_allreduce_s']:.1f} ms; mccl new_group "
              f"{ms['mccl_new_group_s']:.0f} ms, first all_reduce {ms['mccl_new_group_first_allreduce_s']:.1f} ms; "
              f"gloo new_group {ms['gloo_new_group_s']:.0f} ms, first all_reduce "
              f"{ms['gloo_first_allreduce_s']:.1f} ms", flush=True)
        print(f"# per rank after start-up (largest over ranks): {r['threads']:.0f} threads, "
              f"{r['sockets']:.0f} sockets, {r['rss_MB']:.0f} MB resident", flush=True)
    return out
