"""MCCL_WIRE_DTYPE (issue: fewer bytes on the wire) through torch.distributed."""

import subprocess
import sys

import pytest

from conftest import run_workers


@pytest.mark.parametrize("wire", ["bf16", "fp16"])
@pytest.mark.slow
def test_wire_dtype_all_reduce_and_ddp(wire):
    run_workers("wire_dtype.py", 3, env={"MCCL_WIRE_DTYPE": wire, "MCCL_WIRE_DTYPE_MIN_BYTES": "0"},
                timeout=240)


@pytest.mark.slow
def test_wire_dtype_per_group_and_the_ddp_hook():
    run_workers("wire_hook.py", 3, timeout=240)


@pytest.mark.slow
def test_int8_allreduce_and_hook_with_error_feedback():
    run_workers("int8_hook.py", 3, timeout=240)


def test_a_malformed_wire_dtype_fails_init_naming_it():
    code = ("import os, torch.distributed as dist, mccl\n"
            "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='0')\n"
            "import torch.distributed as d\n"
            "store = d.HashStore()\n"
            "try:\n"
            "    d.init_process_group('mccl', store=store, rank=0, world_size=1)\n"
            "except Exception as e:\n"
            "    print('ERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env={"MCCL_WIRE_DTYPE": "int4", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=120)
    assert "MCCL_WIRE_DTYPE=int4 is not one of fp32, bf16, fp16, int8" in out.stdout + out.stderr, out


def test_int8_state_refuses_a_forced_allreduce(monkeypatch):
    # A forced algorithm turns the wire off: error feedback would then send
    # every residual twice.
    import mccl.hooks
    monkeypatch.setenv("MCCL_ALGO", "broadcast=binomial,allreduce=ring")
    with pytest.raises(ValueError, match="turns the int8 wire off"):
        mccl.hooks.Int8State()
