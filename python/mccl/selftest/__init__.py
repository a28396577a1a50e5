"""``mccl selftest``: the first command to run on a new machine (a Mac above
all), after ``pip install``. It prints a report to paste into an issue and
exits non-zero on any failure.

- versions: OS, chip, Python, torch, MCCL and the torch it was built for,
  whether the Metal port was compiled in, which devices torch sees;
- every collective on the device's tensors (MPS on a Mac, else CUDA, else
  CPU) at 2 and 4 local ranks, for every dtype the device has, against exact
  references computed on the CPU; counts 0, 1 and primes; several roots;
- the stream-order traps (a kernel writing the input right before a call, a
  kernel reading the output right after, async ops in flight), with no
  synchronisation anywhere;
- DDP and FSDP2 steps on the device against a float64 CPU run of the same
  steps;
- all_reduce busbw on the device beside CPU busbw in the same group
  (reported, never asserted);
- MPS: what MCCL's Metal port did (fences, commits, staging buffers).

On Linux it runs the same on CPU (CUDA where present), which is how CI runs
it; with MCCL_FAKE_DEVICE_FOR_TESTING=mps-private:<us> CPU tensors go through
the fake Metal port, the Mac path's logic.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

from .worker import MARK

__all__ = ["main", "versions"]


def _chip() -> str:
    if sys.platform == "darwin":
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                  text=True, timeout=5).stdout.strip()
        except OSError:
            return "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _built_for(b: dict) -> str:
    """The torch (and ABI, platform, Python) this mccl was compiled for."""
    if not b:
        return "unknown (no build record)"
    return (f"torch {b['torch']} (CUDA {b['torch_cuda'] or 'none'}, C++11 ABI {b['cxx11_abi']}), "
            f"{b['platform']}, Python {b['python']}")


def versions() -> dict:
    import torch

    import mccl
    mac = platform.mac_ver()[0]
    return {
        "os": f"macOS {mac}" if mac else platform.platform(),
        "chip": _chip(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "mccl": mccl.__version__,
        "mccl_built_for": _built_for(mccl.build_info()),
        "metal_port_compiled": bool(mccl._C._metal_compiled()),
        "mps_built": torch.backends.mps.is_built(),
        "mps_available": torch.backends.mps.is_available(),
        "cuda_available": torch.cuda.is_available(),
        "fake_device": os.environ.get("MCCL_FAKE_DEVICE_FOR_TESTING", ""),
    }


def pick_device(v: dict) -> str:
    if v["mps_available"]:
        return "mps"
    if v["cuda_available"]:
        return "cuda"
    return "cpu"


def _run_world(world: int, device: str, quick: bool, timeout: float) -> tuple[list[dict], str]:
    """Runs the worker on `world` local ranks; returns each rank's record and
    an error text ('' when every rank reported)."""
    from mccl.launch import LaunchError, run
    argv = [sys.executable, "-m", "mccl.selftest.worker", "--device", device] + (["--quick"] if quick else [])
    try:
        results = run(argv, world, timeout=timeout)
    except LaunchError as e:
        results, error = e.results, str(e).splitlines()[0]
    else:
        error = ""
    records = []
    for r in results:
        lines = [ln for ln in r.output.splitlines() if ln.startswith(MARK)]
        if lines:
            records.append(json.loads(lines[-1][len(MARK):]))
        elif not error:
            error = f"rank {r.rank} reported nothing; its output ends:\n" + "\n".join(r.output.splitlines()[-20:])
    return records, error


def _table(world: int, records: list[dict]) -> tuple[list[str], int]:
    """One line per check: ok when it passed on every rank."""
    names: list[str] = []
    failed: dict[str, list[str]] = {}
    for rec in records:
        for res in rec["results"]:
            if res["check"] not in names:
                names.append(res["check"])
            if not res["ok"]:
                failed.setdefault(res["check"], []).append(f"rank {rec['rank']}: {res['detail']}")
    lines = []
    for name in names:
        if name in failed:
            lines.append(f"  FAIL  {name}")
            lines.extend(f"          {d}" for d in failed[name][:4])
        else:
            detail = next((r["detail"] for r in records[0]["results"] if r["check"] == name), "")
            lines.append(f"  ok    {name}" + (f"  ({detail})" if detail else ""))
    return lines, len(failed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mccl selftest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4", help="local world sizes to run (default 2,4)")
    ap.add_argument("--device", default="auto", choices=["auto", "mps", "cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="fewer counts and sizes (CI)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per world size")
    ap.add_argument("--json", help="also write the report as JSON to this file")
    a = ap.parse_args(argv)
    try:
        worlds = [int(x) for x in a.ranks.split(",")]
        if not worlds or min(worlds) < 2:
            raise ValueError
    except ValueError:
        ap.error(f"--ranks must be world sizes >= 2 separated by commas, not {a.ranks!r}")
    v = versions()
    device = pick_device(v) if a.device == "auto" else a.device
    print("mccl selftest report (paste all of it into an issue)")
    for k, val in v.items():
        print(f"  {k:20s} {val}")
    print(f"  {'device under test':20s} {device}")
    total_failed = 0
    report = {"versions": v, "device": device, "worlds": {}}
    for world in worlds:
        print(f"\n{world} ranks on {device}:", flush=True)
        records, error = _run_world(world, device, a.quick, a.timeout)
        lines, failed = _table(world, records) if records else ([], 0)
        print("\n".join(lines))
        if error:
            print(f"  FAIL  the ranks did not all finish: {error}")
            failed += 1
        total_failed += failed
        speeds = records[0]["busbw"] if records else []
        for s in speeds:
            print(f"  busbw all_reduce {s['bytes'] >> 20:4d} MiB on {s['device']:4s}: "
                  f"{s['busbw_GBps']:.3f} GB/s (median of 5, {s['median_s'] * 1e3:.2f} ms)")
        if records and records[0].get("metal_port"):
            print(f"  Metal port of rank 0: {records[0]['metal_port']}")
        report["worlds"][world] = {"records": records, "error": error, "failed": failed}
    print(f"\nselftest: {'FAILED (' + str(total_failed) + ' checks)' if total_failed else 'all checks passed'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if total_failed else 0

