"""README tables are generated from the code and must match it."""

from pathlib import Path

import mccl
from mccl import _docs

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_generated_sections_are_current():
    text = README.read_text()
    assert _docs.render(text) == text, "README is stale: run python -m mccl._docs --update README.md"


def test_every_c10d_method_is_listed():
    expected = {"allreduce", "allreduce_coalesced", "broadcast", "reduce", "allgather", "_allgather_base",
                "allgather_into_tensor_coalesced", "allgather_coalesced", "gather", "scatter",
                "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "alltoall",
                "alltoall_base", "send", "recv", "recvAnysource", "barrier"}
    assert {m for _, m in _docs.COLLECTIVES} == expected


def test_params_are_documented_and_prefixed():
    names = [p["name"] for p in mccl.params()]
    assert len(names) == len(set(names))
    text = README.read_text()
    for p in mccl.params():
        assert p["name"].startswith("MCCL_")
        assert p["doc"].strip()
        assert f"`{p['name']}`" in text
