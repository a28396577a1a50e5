"""Runs PyTorch's DistributedTest suite against mccl (dist_suite.py) and
prints how many tests ran, passed, failed, and were skipped, by reason.

    python tests/torch_suite/run.py                       # all, spawn, world size 3 (~30 min on 2 cores)
    python tests/torch_suite/run.py --start fork          # all, forked ranks (what CI runs)
    python tests/torch_suite/run.py -k all_gather_coalesced
    python tests/torch_suite/run.py --backend gloo_plugin -k test_ddp_logging_data_cpu

Exit status 0 when no test failed and no expected failure passed. --json
writes the counts and every failure for tests to read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Skip reasons, by what excludes the test: another backend's name, missing
# hardware, the world size, or torch itself (tests disabled upstream).
CATEGORIES = [
    ("excluded by backend name", re.compile(r"nccl|gloo|mpi|ucc|xccl", re.I)),
    ("needs CUDA devices", re.compile(r"cuda|gpu", re.I)),
    ("needs another world size", re.compile(r"world size", re.I)),
    ("disabled or unavailable in torch", re.compile(r".")),
]


def category(reason: str) -> str:
    return next(name for name, rx in CATEGORIES if rx.search(reason))


def summarize(xml_path: str) -> dict:
    root = ET.parse(xml_path).getroot()
    out = {"collected": 0, "passed": 0, "failed": [], "xfailed": [], "skipped": Counter(),
           "skip_reasons": Counter()}
    for tc in root.iter("testcase"):
        out["collected"] += 1
        name = tc.get("name")
        kids = {ch.tag: ch for ch in tc}
        if "failure" in kids or "error" in kids:
            ch = kids.get("failure", kids.get("error"))
            out["failed"].append({"test": name, "message": (ch.get("message") or "")[:500]})
        elif "skipped" in kids:
            msg = kids["skipped"].get("message") or ""
            if kids["skipped"].get("type") == "pytest.xfail" or msg.startswith("expected"):
                out["xfailed"].append({"test": name, "message": (kids["skipped"].text or msg)[-800:]})
            else:
                out["skipped"][category(msg)] += 1
                out["skip_reasons"][msg.strip()[:100]] += 1
        else:
            out["passed"] += 1
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--start", choices=["spawn", "fork"], default="spawn",
                   help="how each test starts its ranks (default spawn, as torch's own runner)")
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--backend", default="mccl", help="mccl, or gloo_plugin (Gloo registered as a plugin)")
    p.add_argument("-k", dest="keyword", help="pytest -k expression")
    p.add_argument("--timeout", type=float, default=5400, help="seconds for the whole run")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("-v", "--verbose", action="store_true", help="show pytest's output")
    p.add_argument("-s", dest="no_capture", action="store_true",
                   help="let the ranks' output through (pytest -s): what failed, also in expected failures")
    a = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="mccl-torch-suite-") as tmp:
        xml = os.path.join(tmp, "junit.xml")
        env = dict(os.environ, BACKEND=a.backend, WORLD_SIZE=str(a.world_size), TEMP_DIR=tmp,
                   MCCL_SUITE_START=a.start, OMP_NUM_THREADS="1", PYTORCH_PRINT_REPRO_ON_FAILURE="0")
        cmd = [sys.executable, "-m", "pytest", str(HERE / "dist_suite.py"), "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml}", "-rfE"]
        if a.keyword:
            cmd += ["-k", a.keyword]
        if a.no_capture:
            cmd.append("-s")
        try:
            proc = subprocess.run(cmd, env=env, cwd=HERE, timeout=a.timeout, text=True,
                                  stdout=None if a.verbose else subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            print(f"torch suite: not finished within {a.timeout:.0f} s", file=sys.stderr)
            return 1
        if not os.path.exists(xml):
            print(proc.stdout or "", file=sys.stderr)
            print("torch suite: pytest wrote no report", file=sys.stderr)
            return 1
        s = summarize(xml)

    skipped = sum(s["skipped"].values())
    ran = s["passed"] + len(s["failed"]) + len(s["xfailed"])
    print(f"torch {__import__('torch').__version__}, backend {a.backend}, world size {a.world_size}, "
          f"{a.start}: {s['collected']} collected, {ran} ran: {s['passed']} passed, "
          f"{len(s['failed'])} failed, {len(s['xfailed'])} expected failures (plugin limits); "
          f"{skipped} skipped")
    for cat, n in s["skipped"].most_common():
        print(f"  skipped, {cat}: {n}")
    for x in s["xfailed"]:
        print(f"  expected failure: {x['test']}")
    for f in s["failed"]:
        print(f"  FAILED {f['test']}: {f['message']}")
    if s["failed"] and proc.stdout:
        print(proc.stdout[-6000:], file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**s, "skipped": dict(s["skipped"]), "skip_reasons": dict(s["skip_reasons"]),
                       "ran": ran, "start": a.start, "backend": a.backend,
                       "output": (proc.stdout or "")[-20000:]}, f, indent=1)
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
