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


# ---------------------------------------------------------------------------
# The markdown of README.md and docs/*.md: table cells stay short, relative
# links resolve.

import re  # noqa: E402
import unicodedata  # noqa: E402

ROOT = README.parent
DOCS = [README] + sorted((ROOT / "docs").glob("*.md"))

# A table cell is read across one screen row. 450 characters is about four or
# five sentences: longer than that, a cell is a paragraph squeezed into a
# column, and its detail belongs in prose under the table or in
# docs/lab-notebook.md. (Issue 43 found one cell of 2,867 characters.) It is
# 450 rather than 400 so that the generated settings rows whose doc is one
# short paragraph (MCCL_TRACE_DIR's is 449) still fit.
CELL_LIMIT = 450

# Problems this check found in text that the docs change could not shorten:
# settings docs that come from csrc/core/util/params.def through
# python/mccl/_docs.py, and tables in docs/fleet.md and docs/mps.md. Each key
# is (file, what, the first 40 characters of the cell or row). Shorten one
# and delete its entry; a new problem anywhere fails the test.
KNOWN = {
    ("README.md", "long cell", "normal, latency or high: how MCCL's data"),
    ("README.md", "long cell", "fp32, bf16, fp16 or int8: the dtype floa"),
    # "bf16|fp16" in the doc is an unescaped pipe: GitHub cuts the row there.
    ("README.md", "extra cells", "`MCCL_WIRE_REDUCE`"),
    ("docs/fleet.md", "long cell", "the members meet before the group's rend"),
    ("docs/fleet.md", "long cell", "those that passed wait for the new gener"),
    # the row has a third cell ("about crash_grace_s") in a two-column table
    ("docs/fleet.md", "extra cells", "a member dies in the old group's last ba"),
    ("docs/mps.md", "long cell", "`ATen/mps/MPSAllocatorInterface.h`: `get"),
}


def _outside_code(text):
    """The lines of `text` with fenced code blocks blanked (line numbers kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"\s*(```+|~~~+)", line)
        if fence is None and m:
            fence = m.group(1)[:3]
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def _cells(row):
    # GitHub splits a row at every unescaped pipe, inside code spans too.
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def _table_problems(path):
    rel = path.relative_to(ROOT).as_posix()
    header = None
    for n, line in enumerate(_outside_code(path.read_text()), 1):
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = len(cells)
        elif len(cells) > header:
            yield (rel, "extra cells", cells[0][:40]), f"{rel}:{n}: {len(cells)} cells under a {header}-column header"
        for c in cells:
            if len(c) > CELL_LIMIT:
                yield (rel, "long cell", c[:40]), f"{rel}:{n}: a cell of {len(c)} characters: {c[:60]}..."


def test_table_cells_are_short():
    found = {}
    for path in DOCS:
        found.update(_table_problems(path))
    new = [msg for key, msg in found.items() if key not in KNOWN]
    assert not new, (f"table cells over {CELL_LIMIT} characters or rows with more cells than their "
                     "header (split the cell into rows, or move its detail under the table):\n"
                     + "\n".join(new))


def _slug(heading):
    """GitHub's anchor for a heading: lower case, letters, digits, spaces,
    hyphens and underscores kept, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    kept = "".join(ch for ch in text
                   if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return kept.replace(" ", "-")


def _anchors(path):
    seen, out = {}, set()
    for line in _outside_code(path.read_text()):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = _slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)


def _links(path):
    text = "\n".join(_outside_code(path.read_text()))
    for para in re.split(r"\n\s*\n", text):
        para = re.sub(r"`[^`]*`", "", para)  # code spans are not links
        yield from LINK.findall(para)
        yield from REFDEF.findall(para)


def test_relative_links_resolve():
    bad = []
    for path in DOCS:
        rel = path.relative_to(ROOT).as_posix()
        for target in _links(path):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                bad.append(f"{rel}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{rel}: {target}: no heading with that anchor in {dest.name}")
    assert not bad, "broken relative links:\n" + "\n".join(bad)
