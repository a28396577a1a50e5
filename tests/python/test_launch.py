"""mccl.launch: the environment every local rank gets."""

import os
import subprocess
import sys

import pytest

from mccl.launch import run

SHOW = "import os, torch; print('threads', os.environ.get('OMP_NUM_THREADS', '-'), torch.get_num_threads())"


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _threads(outputs) -> set[tuple[str, int]]:
    """(OMP_NUM_THREADS as the rank saw it, torch's intra-op threads) of each rank."""
    out = set()
    for text in outputs:
        for line in text.splitlines():
            if line.startswith("threads "):
                _, var, n = line.split()
                out.add((var, int(n)))
    return out


@pytest.fixture
def show(tmp_path, monkeypatch):
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return [sys.executable, str(script)]


@pytest.mark.slow
def test_several_ranks_share_the_cores(show):
    for nproc in (2, 3):
        want = max(1, _cores() // nproc)
        res = run(show, nproc, timeout=120)
        # torch may use fewer (its MKL build caps at the physical cores), never more
        got = _threads(r.output for r in res)
        assert {var for var, _ in got} == {str(want)}, (nproc, got)
        assert all(1 <= n <= want for _, n in got), (nproc, got)
        assert len(res) == nproc


def test_one_rank_keeps_torchs_default(show):
    # As torchrun: one process on the machine has its cores to itself.
    (res,) = run(show, 1, timeout=120)
    assert _threads([res.output]) == {("-", _default_threads())}


def _default_threads() -> int:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    p = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                       capture_output=True, text=True, timeout=120, check=True)
    return int(p.stdout)


@pytest.mark.slow
def test_the_callers_choice_stands(show, monkeypatch):
    # From env= (over the environment's), from the environment, and an empty
    # value counts as unset. Only the variable is compared: torch caps its
    # threads at the cores.
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert {v for v, _ in _threads(r.output for r in run(show, 2, timeout=120, env={"OMP_NUM_THREADS": "7"}))} == {"7"}
    assert {v for v, _ in _threads(r.output for r in run(show, 2, timeout=120))} == {"5"}
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    want = str(max(1, _cores() // 2))
    assert {v for v, _ in _threads(r.output for r in run(show, 2, timeout=120))} == {want}


@pytest.mark.slow
def test_the_command_says_what_it_chose(show):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    p = subprocess.run([sys.executable, "-m", "mccl.launch", "--nproc", "2", *show[1:]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    want = max(1, _cores() // 2)
    assert f"OMP_NUM_THREADS={want} for each of 2 ranks" in p.stderr
    assert f"threads {want} " in p.stdout
    env["OMP_NUM_THREADS"] = "1"
    p = subprocess.run([sys.executable, "-m", "mccl.launch", "--nproc", "2", *show[1:]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "OMP_NUM_THREADS=" not in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "mccl.launch", "--nproc", "0", *show[1:]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--nproc must be at least 1, not 0" in p.stderr, p.stderr
