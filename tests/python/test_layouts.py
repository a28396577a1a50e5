"""List and list-of-lists arguments in torch's documented layout (distinct
sizes per position, checked against Gloo), and calls refused whole before any
part of them is sent."""

import pytest

from conftest import run_workers


@pytest.mark.parametrize("world", [2, *(pytest.param(n, marks=pytest.mark.slow) for n in (3, 5))])
def test_list_layouts_match_torch_docs_and_gloo(world):
    outs = run_workers("layouts.py", world, timeout=240)
    assert "checks passed" in outs[0]
