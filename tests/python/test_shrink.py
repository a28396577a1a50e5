"""torch.distributed.shrink_group over mccl (SHRINK_DEFAULT and SHRINK_ABORT),
and abort() of one group leaving the others usable."""

import pytest
import torch.distributed as dist

from conftest import run_workers

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not hasattr(dist, "shrink_group"), reason="this torch has no shrink_group (2.10+)")
def test_shrink_group_default_and_abort():
    outs = run_workers("shrink.py", 5, timeout=180, expect_exit={4: 17})
    for r in (0, 1, 3):
        assert "checks passed" in outs[r], outs[r][-3000:]
    assert "left the group" in outs[2]
