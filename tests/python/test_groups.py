"""Subgroups, object collectives, async ops, futures and p2p subsets."""

import pytest

from conftest import run_workers


@pytest.mark.parametrize("world", [2, *(pytest.param(n, marks=pytest.mark.slow) for n in (3, 4))])
def test_groups_objects_async(world):
    run_workers("groups.py", world)
