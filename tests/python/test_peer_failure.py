"""Dead and silent peers (multi-process tier): survivors fail fast and
clearly, the group is poisoned, and shutdown never hangs."""

import re

import pytest

from conftest import run_workers


@pytest.mark.parametrize("world,victim,algo", [(3, 1, ""),
                                               pytest.param(5, 2, "ring", marks=pytest.mark.slow)])
def test_dead_peer_detected_within_two_seconds(world, victim, algo, tmp_path):
    # With the ring forced, ranks 0 and 4 never connect to rank 2: they learn
    # of its death from their neighbours' abort frames.
    env = {"MCCL_ALGO": f"allreduce={algo},allgather=ring"} if algo else {}
    outs = run_workers("peer_failure.py", world, "dead", str(victim), str(tmp_path / "died"),
                       env=env, expect_exit={victim: -9}, timeout=120)
    times = [float(m.group(1)) for o in outs if (m := re.search(r"DETECT_MS ([\d.]+)", o))]
    assert len(times) == world - 1
    print("detection times (ms):", times)


@pytest.mark.slow
def test_silent_peer_fails_at_the_op_timeout(tmp_path):
    outs = run_workers("peer_failure.py", 3, "silent", "2", str(tmp_path / "left_barrier"),
                       expect_exit={2: -9}, timeout=120)
    times = [float(m.group(1)) for o in outs if (m := re.search(r"SILENT_MS ([\d.]+)", o))]
    assert len(times) == 2
    print("silent-peer failure times (ms):", times)
