"""Strangers on the data plane (multi-process tier): a flood of garbage,
half-open and early-closing connections during a job is rejected and
logged, the job's results stay exact and no descriptor leaks."""

import re

import pytest

from conftest import run_workers

pytestmark = pytest.mark.slow


def test_flood_of_strangers_does_not_break_a_running_job():
    outs = run_workers("flood.py", 4, "400", timeout=180)
    m = re.search(r"FLOOD attempts=(\d+) quiet_ms=(\d+) flooded_ms=(\d+) after_ms=(\d+)", outs[0])
    assert m, outs[0][-2000:]
    print(m.group(0))
    assert int(m.group(1)) > 100
    # Rejections are logged, rate-limited: far fewer lines than connections.
    logged = outs[1].count("rejected a connection from")
    assert 0 < logged < int(m.group(1)) // 4, logged
