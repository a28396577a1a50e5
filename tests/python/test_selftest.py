"""mccl selftest: the command a Mac owner runs first. On Linux it runs the
same checks on CPU tensors, and through the fake Metal port (the Mac path's
staging logic); a wrong result anywhere makes it fail."""

import os
import subprocess
import sys

import pytest


def selftest(*args, env=None, timeout=600):
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e.update(env or {})
    try:
        p = subprocess.run([sys.executable, "-m", "mccl.cli", "selftest", *args], env=e,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"mccl selftest {args} did not finish in {timeout} s:\n{err.stdout}")
    return p.returncode, p.stdout + p.stderr


@pytest.mark.slow
def test_selftest_on_cpu_passes_and_reports():
    rc, out = selftest("--ranks", "2,3", "--quick")
    assert rc == 0, out
    for needle in ("mccl selftest report", "torch ", "metal_port_compiled", "2 ranks on cpu",
                   "3 ranks on cpu", "ok    all_reduce bfloat16", "ok    trap: kernel writes the input",
                   "ok    DDP, 3 SGD steps", "ok    FSDP2, 3 SGD steps", "busbw all_reduce",
                   "selftest: all checks passed"):
        assert needle in out, (needle, out[-3000:])


@pytest.mark.slow
def test_selftest_through_the_fake_metal_port():
    # Private storage: every byte through queued blits into pooled buffers.
    rc, out = selftest("--ranks", "3", "--quick",
                       env={"MCCL_FAKE_DEVICE_FOR_TESTING": "mps-private:50"})
    assert rc == 0, out
    assert "fake_device          mps-private:50" in out
    assert "Metal port of rank 0: {'fences':" in out, out[-2000:]
    # then() callbacks ran where MPS is safe: this thread, or the callback
    # thread while it waited.
    line = next(x for x in out.splitlines() if "Future callbacks that run kernels" in x)
    assert line.strip().startswith("ok") and "other MCCL thread" not in line, line


@pytest.mark.parametrize("fault,check", [("all_reduce", "all_reduce float32"),
                                         ("trap", "trap: kernel writes the input")])
@pytest.mark.slow
def test_selftest_fails_on_a_wrong_result(fault, check):
    rc, out = selftest("--ranks", "3", "--quick", env={"MCCL_SELFTEST_BREAK": fault})
    assert rc == 1, out
    assert f"FAIL  {check}" in out and "rank 2: wrong result" in out, out[-3000:]
    assert "selftest: FAILED" in out
    # The other checks stay in step and pass.
    assert "ok    barrier" in out and "ok    DDP" in out, out[-3000:]


def test_selftest_refuses_bad_arguments():
    rc, out = selftest("--ranks", "1")
    assert rc == 2 and "--ranks must be world sizes >= 2" in out, out
