"""Device tensors. On machines without a GPU the device staging runs on the
fake device (MCCL_FAKE_DEVICE_FOR_TESTING: CPU tensors staged through a
serial fake stream with delayed copies and poisoned host buffers); with CUDA
the same workers run on real CUDA tensors, and a mixed CUDA/CPU group."""

import pytest
import torch

from conftest import run_workers

# Every test here runs several ranks through a (fake or real) device for 10 s or more.
pytestmark = pytest.mark.slow

FAKE = {"MCCL_FAKE_DEVICE_FOR_TESTING": "300"}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (none on this machine)")


@pytest.mark.parametrize("world", [2, 3])
def test_fake_device_staging_orders_copies(world):
    run_workers("device_staging.py", world, "cpu", env=FAKE, timeout=300)


def test_fake_device_every_collective():
    outs = run_workers("collectives.py", 3, env=FAKE, timeout=420)
    assert "checks passed" in outs[0]


def test_fake_device_in_pieces():
    # all_reduce of more than 2 x MCCL_PIECE_BYTES runs as
    # pieces, each staged and copied back on its own (late-kernel checks and
    # DDP included); and the whole collective suite with tiny pieces.
    env = dict(FAKE, MCCL_PIECE_BYTES="64K")
    run_workers("device_staging.py", 3, "cpu", env=env, timeout=300)
    outs = run_workers("collectives.py", 3, env=dict(FAKE, MCCL_PIECE_BYTES="1K"), timeout=420)
    assert "checks passed" in outs[0]


@cuda
@pytest.mark.parametrize("world", [2, 3])
def test_cuda_staging_and_ddp(world):
    run_workers("device_staging.py", world, "cuda", timeout=300)


@cuda
def test_cuda_every_collective():
    outs = run_workers("collectives.py", 3, env={"MCCL_TEST_DEVICE": "cuda"}, timeout=600)
    assert "checks passed" in outs[0]


@cuda
def test_mixed_cuda_and_cpu_group():
    # Ranks 0 and 1 hold CUDA tensors, ranks 2 and 3 CPU tensors.
    outs = run_workers("collectives.py", 4, env={"MCCL_TEST_DEVICE": "cuda:0,cuda:0,cpu,cpu"}, timeout=600)
    assert "checks passed" in outs[0]
