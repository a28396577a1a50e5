"""mccl.launch: the environment every local rank gets."""

import os
import subprocess
import sys

from mccl.launch import run

SHOW = "import os, torch; print('threads', os.environ['OMP_NUM_THREADS'], torch.get_num_threads())"


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _threads(outputs) -> set[str]:
    return {line for out in outputs for line in out.splitlines() if line.startswith("threads")}


def test_ranks_share_the_cores_unless_told(monkeypatch, tmp_path):
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for nproc in (1, 2, 3):
        want = max(1, _cores() // nproc)
        res = run([sys.executable, str(script)], nproc, timeout=120)
        assert _threads(r.output for r in res) == {f"threads {want} {want}"}, (nproc, [r.output for r in res])
    # The caller's choice stands, from the environment or from env= (torch
    # itself caps its threads at the cores, so only the variable is compared).
    res = run([sys.executable, str(script)], 2, timeout=120, env={"OMP_NUM_THREADS": "7"})
    assert {t.split()[1] for t in _threads(r.output for r in res)} == {"7"}
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    res = run([sys.executable, str(script)], 2, timeout=120)
    assert {t.split()[1] for t in _threads(r.output for r in res)} == {"5"}


def test_the_command_says_what_it_chose(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    p = subprocess.run([sys.executable, "-m", "mccl.launch", "--nproc", "2", str(script)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    want = max(1, _cores() // 2)
    assert f"OMP_NUM_THREADS={want} for each of 2 ranks" in p.stderr
    assert f"threads {want} {want}" in p.stdout
    env["OMP_NUM_THREADS"] = "1"
    p = subprocess.run([sys.executable, "-m", "mccl.launch", "--nproc", "2", str(script)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "OMP_NUM_THREADS=" not in p.stderr, p.stderr
