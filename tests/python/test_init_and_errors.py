"""init methods, torchrun, and error behaviour."""

import os
import subprocess
import sys

import pytest

from conftest import WORKERS, run_workers


@pytest.mark.parametrize("method", ["env", "tcp", "file"])
def test_init_methods(method, tmp_path):
    args = [method] + ([str(tmp_path / "rendezvous")] if method == "file" else [])
    run_workers("init_methods.py", 3, *args)


def test_torchrun_standalone():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(WORKERS / "init_methods.py"), "env"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                           env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in 180 s:\n{e.stdout}\n{e.stderr}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("WORKER OK") == 2, p.stdout


@pytest.mark.parametrize("world", [2, 3])
def test_errors_are_clear_and_do_not_hang(world):
    run_workers("errors.py", world)
