"""Soak (multi-process tier): 20,000 mixed collectives of random sizes on 4
ranks, every result checked, with no growth in file descriptors, threads or
resident memory. scripts/soak.sh runs a longer one."""

import re

import pytest

from conftest import run_workers

pytestmark = pytest.mark.slow


def test_twenty_thousand_mixed_collectives_leak_nothing():
    outs = run_workers("soak.py", 4, "20000", "20000", "7", timeout=400)
    for out in outs:
        m = re.search(r"SOAK .*", out)
        assert m, out[-2000:]
    print(re.search(r"SOAK .*", outs[0]).group(0))
