"""Run N local ranks of a script, like ``torchrun --standalone``, with a deadline.

Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, and with several ranks OMP_NUM_THREADS (this machine's cores
shared among them) unless it is set already. If any rank fails, or the
deadline passes, every other rank (and its children) is killed and the
failure is reported with each rank's output.
Tests, benchmarks and the examples use this; on several machines use torchrun.

    python -m mccl.launch --nproc 4 examples/train_ddp.py --steps 100
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class RankResult:
    rank: int
    returncode: int | None
    output: str


class LaunchError(RuntimeError):
    """A rank failed or the deadline passed; ``results`` holds every rank's output."""

    def __init__(self, message: str, results: list[RankResult]):
        super().__init__(message)
        self.results = results


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill(procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    end = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _tail(text: str, lines: int = 60) -> str:
    parts = text.splitlines()
    return "\n".join(parts[-lines:])


def threads_per_rank(nproc: int) -> int:
    """Intra-op threads that let `nproc` local ranks share this machine's
    cores without oversubscribing them: torch's default is one per core in
    every process, and N processes of one-thread-per-core spend their time
    spinning in each other's way (8 ranks of a ViT on 2 cores ran 13x slower)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS has no affinity call
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, nproc))


def _threads_to_set(environ: Mapping[str, str], nproc: int) -> int | None:
    """The OMP_NUM_THREADS that run() gives `nproc` ranks whose environment
    would be `environ`: None where it leaves the variable alone (one rank,
    or a value already set)."""
    return threads_per_rank(nproc) if nproc > 1 and not environ.get("OMP_NUM_THREADS") else None


def run(
    argv: list[str],
    nproc: int,
    *,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
    stream_rank: int | None = None,
    master_port: int | None = None,
    expect_exit: dict[int, int] | None = None,
    wrap=None,
    rank_env=None,
) -> list[RankResult]:
    """Runs ``argv`` (a command) as ``nproc`` ranks; returns their results.

    Output of every rank is captured (and returned); ``stream_rank``'s output
    is also passed through live. Raises LaunchError on the first failure or
    at the deadline, after killing the remaining ranks. ``expect_exit`` maps
    ranks to the exit code they are meant to end with (a fault-injection test
    kills a rank on purpose: -9 for SIGKILL); those exits are not failures.
    ``wrap(rank)`` gives an argv prefix for a rank (e.g. ``ip netns exec
    HOST`` to run it on a network-lab host) and ``rank_env(rank)`` extra
    environment for it. OMP_NUM_THREADS, unless set in this process's
    environment or `env` (or empty), is threads_per_rank(nproc) when there
    are several ranks (torchrun sets it for several ranks only, too).
    """
    expected = dict(expect_exit or {})
    port = master_port or free_port()
    procs: list[subprocess.Popen] = []
    logs = []
    base = dict(os.environ)
    base.update(env or {})
    threads = _threads_to_set(base, nproc)
    if threads is not None:
        base["OMP_NUM_THREADS"] = str(threads)
    for rank in range(nproc):
        e = dict(base)
        e.update(
            RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR=e.get("MASTER_ADDR", "127.0.0.1"),
            MASTER_PORT=str(port),
            PYTHONUNBUFFERED="1",
        )
        if rank_env:
            e.update(rank_env(rank))
        log = tempfile.TemporaryFile(mode="w+b")
        logs.append(log)
        out = None if rank == stream_rank else log
        procs.append(
            subprocess.Popen((wrap(rank) if wrap else []) + list(argv), env=e, stdout=out, stderr=subprocess.STDOUT if out else None,
                             start_new_session=True)
        )

    def results() -> list[RankResult]:
        res = []
        for rank, (p, log) in enumerate(zip(procs, logs)):
            log.seek(0)
            res.append(RankResult(rank, p.poll(), log.read().decode(errors="replace")))
        return res

    deadline = time.monotonic() + timeout
    failed: list[int] = []
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, expected.get(r, 0))]
            if failed or all(c == expected.get(r, 0) for r, c in enumerate(codes)):
                break
            if time.monotonic() > deadline:
                _kill(procs)
                res = results()
                raise LaunchError(_report(f"deadline of {timeout:.0f} s passed", res), res)
            time.sleep(0.05)
        if failed:
            # Give the others a moment to fail on their own (their errors name
            # the cause from their side), then stop them.
            end = time.monotonic() + 5.0
            while time.monotonic() < end and any(p.poll() is None for p in procs):
                time.sleep(0.05)
            _kill(procs)
            res = results()
            raise LaunchError(_report(f"rank {failed[0]} exited with code {codes[failed[0]]}", res), res)
        return results()
    finally:
        _kill(procs, grace=0.5)
        for log in logs:
            log.close()


def run_tool(module: str, argv: list[str], nproc: int | None, *, timeout: float, tool: str,
             netlab: str | None = None, on_lab=None) -> int:
    """Runs ``python -m module argv`` as `nproc` ranks with rank 0's output
    streamed, each rank on host r of network lab `netlab` when given (then
    `nproc` defaults to the lab's hosts). ``on_lab(lab, env)`` may add to the
    ranks' environment. Errors are printed prefixed by `tool`; returns the
    exit status (0, 1 when a rank failed, 2 for a lab that cannot be used)."""
    env = {"OMP_NUM_THREADS": "1"}
    placement = {}
    if netlab:
        from .netlab import Lab, LabError
        try:
            lab = Lab.load(netlab)
            nproc = nproc or len(lab.hosts)
            placement = lab.launch_options(nproc)
        except LabError as e:
            print(f"{tool}: {e}", file=sys.stderr)
            return 2
        if on_lab is not None:
            on_lab(lab, env)
    try:
        run([sys.executable, "-m", module, *argv], nproc or 2, timeout=timeout, stream_rank=0,
            env=env, **placement)
    except LaunchError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


def _report(reason: str, res: list[RankResult]) -> str:
    lines = [f"mccl.launch: {reason}"]
    for r in res:
        lines.append(f"----- rank {r.rank} (exit code {r.returncode}) -----")
        lines.append(_tail(r.output))
    return "\n".join(lines)


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mccl.launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=2, help="ranks to start on this machine")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before every rank is killed")
    ap.add_argument("script", help="Python script to run")
    ap.add_argument("script_args", nargs=argparse.REMAINDER)
    a = ap.parse_args(args)
    if a.nproc < 1:
        ap.error(f"--nproc must be at least 1, not {a.nproc}")
    threads = _threads_to_set(os.environ, a.nproc)
    if threads is not None:
        print(f"mccl.launch: OMP_NUM_THREADS={threads} for each of {a.nproc} ranks "
              f"(this machine's cores shared; set OMP_NUM_THREADS to choose)", file=sys.stderr)
    try:
        res = run([sys.executable, a.script, *a.script_args], a.nproc, timeout=a.timeout, stream_rank=0)
    except LaunchError as e:
        print(e, file=sys.stderr)
        return 1
    for r in res[1:]:
        if r.output.strip():
            print(f"----- rank {r.rank} -----\n{_tail(r.output, 20)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
