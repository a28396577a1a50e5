"""DiLoCoState's outer thread and its spare tensors (diloco_outer.py),
without a process group."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from mccl.elastic.diloco_outer import OuterThread, SparePool


def _outer_threads() -> int:
    return sum(t.name == "mccl-diloco-outer" and t.is_alive() for t in threading.enumerate())


def test_jobs_run_in_order_and_errors_reach_the_caller(monkeypatch):
    monkeypatch.setattr(OuterThread, "IDLE_S", 0.2)
    before = _outer_threads()
    ot, seen = OuterThread(), []
    gate = threading.Event()
    first = ot.submit(lambda out: (gate.wait(5), seen.append(1)))
    second = ot.submit(lambda out: seen.append(2))

    def boom(out):
        raise ValueError("outer step failed (test)")
    third = ot.submit(boom)
    assert not first.done.is_set()
    gate.set()
    first.result(), second.result()
    assert seen == [1, 2]
    with pytest.raises(ValueError, match="outer step failed"):
        third.result()
    # Idle: the thread ends (nothing of the jobs kept), and starts again.
    end = time.monotonic() + 5
    while _outer_threads() > before and time.monotonic() < end:
        time.sleep(0.05)
    assert _outer_threads() == before
    assert ot.submit(lambda out: seen.append(3)).result() and seen == [1, 2, 3]


def test_the_pool_hands_back_a_tensor_of_the_same_shape_and_keeps_a_few():
    pool = SparePool()
    a = torch.zeros(1 << 17)
    pool.give(a)
    assert pool.take(torch.ones(1 << 17)) is a and len(pool) == 0
    b = pool.take(torch.ones(1 << 17))  # none left: a new one
    assert b is not a and b.shape == a.shape
    pool.give(torch.zeros(10))  # small: not kept
    pool.give(torch.zeros(1 << 17, dtype=torch.float64))
    assert len(pool) == 1 and pool.take(torch.ones(1 << 17)).dtype == torch.float32  # not the float64 one
    for _ in range(SparePool.SIZE + 3):
        pool.give(torch.zeros(1 << 17))
    assert len(pool) == SparePool.SIZE
