"""mccl doctor: checks a fleet's network from inside an MCCL job.

Run on every rank (torchrun across machines, or local / network-lab ranks
started by ``mccl doctor --nproc N`` / ``--netlab NAME``). Rank 0 prints each
rank's interface and address, its socket-buffer limits with the sysctl that
raises them, how MCCL's network threads are scheduled (MCCL_THREAD_PRIORITY,
read back from /proc on Linux), the pairwise TCP goodput matrix measured over MCCL's own
transport, and names the slowest link and, when one host is slow on all its
links, that host.

The matrix is measured in world-1 rounds: in round s every rank sends to
rank+s and receives from rank-s at once (every link loaded, as in a ring),
and each receiver times its own receive, so a slow sender or receiver slows
only its own links.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import threading
import time

import torch
import torch.distributed as dist

SLOW_FACTOR = 0.75  # a host whose links run below this share of the others' is slow
ADVISED_BUFFER = 16 << 20


def socket_limits() -> dict:
    """The OS's socket-buffer ceilings and the commands that raise them."""
    out: dict = {"os": platform.system()}
    if out["os"] == "Linux":
        def read(path):
            try:
                with open(path) as f:
                    return [int(x) for x in f.read().split()]
            except OSError:
                return None
        out["net.core.rmem_max"] = (read("/proc/sys/net/core/rmem_max") or [None])[0]
        out["net.core.wmem_max"] = (read("/proc/sys/net/core/wmem_max") or [None])[0]
        out["net.ipv4.tcp_rmem"] = read("/proc/sys/net/ipv4/tcp_rmem")
        out["net.ipv4.tcp_wmem"] = read("/proc/sys/net/ipv4/tcp_wmem")
        low = [k for k in ("net.core.rmem_max", "net.core.wmem_max")
               if out[k] is not None and out[k] < ADVISED_BUFFER]
        auto = [k for k in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")
                if out[k] and out[k][-1] < ADVISED_BUFFER]
        cmds = []
        if low:
            cmds.append("sudo sysctl -w " + " ".join(f"{k}={ADVISED_BUFFER}" for k in low))
        if auto:
            cmds.append("sudo sysctl -w " + " ".join(f"{k}='{out[k][0]} {out[k][1]} {ADVISED_BUFFER}'"
                                                     for k in auto))
        out["advice"] = cmds
    elif out["os"] == "Darwin":
        def sysctl(name):
            try:
                return int(subprocess.run(["sysctl", "-n", name], capture_output=True, text=True).stdout)
            except (OSError, ValueError):
                return None
        for k in ("kern.ipc.maxsockbuf", "net.inet.tcp.sendspace", "net.inet.tcp.recvspace"):
            out[k] = sysctl(k)
        m = out["kern.ipc.maxsockbuf"]
        out["advice"] = [f"sudo sysctl -w kern.ipc.maxsockbuf={2 * ADVISED_BUFFER}"] \
            if m is not None and m < 2 * ADVISED_BUFFER else []
    else:
        out["advice"] = []
    return out


def _sched(tid) -> tuple[int, int]:
    """A thread's nice value and time slice in ns (Linux: /proc)."""
    with open(f"/proc/self/task/{tid}/sched") as f:
        slice_ns = next(int(line.split(":")[1]) for line in f if line.startswith("se.slice"))
    return os.getpriority(os.PRIO_PROCESS, int(tid)), slice_ns


def thread_scheduling() -> dict:
    """How this process's MCCL data-path threads (receive, send, engine) are
    scheduled against its own thread: MCCL_THREAD_PRIORITY as set (or its
    default), and on Linux every such thread's nice value and time slice
    read back from /proc (elsewhere not read)."""
    from . import params
    default = next(p["default"] for p in params() if p["name"] == "MCCL_THREAD_PRIORITY")
    out: dict = {"setting": os.environ.get("MCCL_THREAD_PRIORITY") or default, "kernel": platform.release()}
    if platform.system() != "Linux":
        return out
    try:
        out["main"] = list(_sched(threading.get_native_id()))
    except (OSError, StopIteration):
        return out
    seen: dict[str, int] = {}
    slices: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            if name in ("mccl-recv", "mccl-send", "mccl-engine"):
                nice, slice_ns = _sched(tid)
                key = f"nice {nice}, slice {slice_ns / 1e6:.2f} ms"
                seen[key] = seen.get(key, 0) + 1
                slices.add(slice_ns)
        except (OSError, ProcessLookupError, StopIteration):
            pass  # ended meanwhile
    out["threads"] = seen
    out["slices_ns"] = sorted(slices)  # the MCCL threads' slices, in ns
    return out


def measure_matrix(nbytes: int, rounds: int) -> list[list[float]]:
    """GB/s of every directed link (row = sender, column = receiver)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    send = torch.full((nbytes // 4,), float(rank))
    recv = torch.empty(nbytes // 4)
    mine = [0.0] * world  # rate of link src -> me
    for s in range(1, world):
        dst, src = (rank + s) % world, (rank - s) % world
        rates = []
        for _ in range(rounds + 1):  # the first round warms the connections up
            dist.barrier()
            t0 = time.perf_counter()
            sreq = dist.isend(send, dst)
            rreq = dist.irecv(recv, src)
            rreq.wait()
            rates.append(nbytes / (time.perf_counter() - t0) / 1e9)
            sreq.wait()
            if recv[0].item() != float(src):
                raise RuntimeError(f"doctor: rank {rank} received wrong data from rank {src}")
        mine[src] = statistics.median(rates[1:])
    cols = [None] * world
    dist.all_gather_object(cols, mine)
    return [[cols[dst][src] if src != dst else 0.0 for dst in range(world)] for src in range(world)]


def diagnose(matrix: list[list[float]]) -> dict:
    world = len(matrix)
    links = [(matrix[i][j], i, j) for i in range(world) for j in range(world) if i != j]
    if not links:
        return {"median_GBps": None, "slowest_link": None, "slow_hosts": []}
    med = statistics.median(v for v, _, _ in links)
    v, i, j = min(links)
    # A host is slow when its own links (in and out) run well below the links
    # that do not touch it; with two hosts there is nothing to compare with.
    scores, others = {}, {}
    for h in range(world):
        mine = [v for v, i, j in links if h in (i, j)]
        rest = [v for v, i, j in links if h not in (i, j)]
        scores[h] = statistics.median(mine)
        others[h] = statistics.median(rest) if rest else None
    slow = [h for h in range(world) if others[h] and scores[h] < SLOW_FACTOR * others[h]]
    return {"median_GBps": med, "slowest_link": {"src": i, "dst": j, "GBps": v, "ratio": v / med},
            "host_median_GBps": scores, "others_median_GBps": others, "slow_hosts": slow}


def run(args) -> dict | None:
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    matrix = measure_matrix(args.bytes, args.rounds) if world > 1 else [[0.0]]
    # After the matrix: every connection (and its threads) exists by now.
    info = {"rank": rank, "hostname": socket.gethostname(), "interface": backend.interface,
            "address": backend.address, "limits": socket_limits(), "threads": thread_scheduling()}
    infos = [None] * world
    dist.all_gather_object(infos, info)
    if rank != 0:
        return None
    report = {"ranks": infos, "matrix_GBps": matrix, "bytes": args.bytes, "rounds": args.rounds,
              "diagnosis": diagnose(matrix)}
    if args.json:
        print(json.dumps(report, indent=1), flush=True)
    else:
        print(render(report), flush=True)
    return report


def render(r: dict) -> str:
    infos, m, d = r["ranks"], r["matrix_GBps"], r["diagnosis"]
    world = len(infos)
    lines = [f"mccl doctor: {world} ranks", "",
             f"{'rank':>4}  {'host':<16} {'interface':<10} {'address':<22} socket buffers"]
    for i in infos:
        lim = i["limits"]
        if lim["os"] == "Linux":
            buf = (f"rmem_max {_mb(lim['net.core.rmem_max'])}, wmem_max {_mb(lim['net.core.wmem_max'])}, "
                   f"tcp autotuning up to {_mb((lim['net.ipv4.tcp_rmem'] or [0])[-1])} in / "
                   f"{_mb((lim['net.ipv4.tcp_wmem'] or [0])[-1])} out")
        elif lim["os"] == "Darwin":
            buf = f"kern.ipc.maxsockbuf {_mb(lim['kern.ipc.maxsockbuf'])}"
        else:
            buf = "unknown on " + lim["os"]
        lines.append(f"{i['rank']:>4}  {i['hostname'][:16]:<16} {i['interface']:<10} {i['address']:<22} {buf}")
    advice = sorted({c for i in infos for c in i["limits"].get("advice", [])})
    if advice:
        lines += ["", "Socket buffers below 16 MiB limit throughput on fast or distant links; raise them with:"]
        lines += [f"  {c}" for c in advice]
        lines.append("  (macOS: sudo sysctl -w kern.ipc.maxsockbuf=33554432; Linux: the lines above; "
                     "MCCL_SOCKET_BUFFER sets what MCCL asks for)")
    lines += ["", "MCCL's receive, send and engine threads (MCCL_THREAD_PRIORITY; the rank's own thread in brackets):"]
    for i in infos:
        t = i.get("threads") or {}
        if "threads" not in t:
            lines.append(f"  r{i['rank']:<3} {t.get('setting')}: not read on this system")
            continue
        got = "; ".join(f"{n}x {k}" for k, n in sorted(t["threads"].items())) or "none running"
        nice, slice_ns = t["main"]
        lines.append(f"  r{i['rank']:<3} {t['setting']}: {got}  [nice {nice}, slice {slice_ns / 1e6:.2f} ms]")
        if t["setting"] != "normal" and t.get("slices_ns") and set(t["slices_ns"]) == {slice_ns}:
            lines.append(f"       kernel {t['kernel']} gives every thread the same slice: a short one for MCCL's "
                         f"threads needs Linux 6.12 or later")
    if world > 1:
        lines += ["", f"TCP goodput over MCCL, MB/s (row sends, column receives; "
                      f"{_mb(r['bytes'])} messages, all links loaded, median of {r['rounds']}):",
                  "      " + "".join(f"{'r' + str(j):>9}" for j in range(world))]
        for i in range(world):
            lines.append(f"  r{i:<3}" + "".join(f"{'-' if i == j else f'{m[i][j] * 1000:.1f}':>9}"
                                               for j in range(world)))
        s = d["slowest_link"]
        lines += ["", f"median link: {d['median_GBps'] * 1000:.1f} MB/s "
                      f"({d['median_GBps'] * 8:.2f} Gbit/s)",
                  f"slowest link: rank {s['src']} ({infos[s['src']]['address']}) -> rank {s['dst']} "
                  f"({infos[s['dst']]['address']}): {s['GBps'] * 1000:.1f} MB/s, {s['ratio']:.2f}x the median"]
        for h in d["slow_hosts"]:
            lines.append(f"SLOW HOST: rank {h} ({infos[h]['hostname']}, {infos[h]['address']}) is slow on all "
                         f"its links: median {d['host_median_GBps'][h] * 1000:.1f} MB/s, "
                         f"{d['host_median_GBps'][h] / d['others_median_GBps'][h]:.2f}x the other links'; check its cable, "
                         f"switch port, link speed (ethtool / networksetup) and load")
        if not d["slow_hosts"]:
            lines.append("no host is slow on all its links")
    return "\n".join(lines)


def _mb(n) -> str:
    if n is None:
        return "?"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def main_rank(args) -> int:
    import mccl  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("mccl")
    try:
        run(args)
    finally:
        dist.destroy_process_group()
    return 0


def env_has_rank() -> bool:
    return "RANK" in os.environ
