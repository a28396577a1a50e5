"""DDP and FSDP2 over mccl give the same parameters as a single process;
torch.distributed.checkpoint round-trips FSDP2's sharded state."""

import pytest

from conftest import needs_cpu_fsdp2, run_workers


@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_ddp_parity(world):
    run_workers("ddp.py", world)


@needs_cpu_fsdp2
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.slow
def test_fsdp2_parity_and_checkpoint(world, tmp_path):
    run_workers("fsdp.py", world, str(tmp_path / "ckpt"))
