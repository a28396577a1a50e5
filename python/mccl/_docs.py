"""Tables in README.md that are generated from the code, and checked by
tests/python/test_docs.py: the MCCL_* settings and the support matrix.

    python -m mccl._docs            # print the tables
    python -m mccl._docs --update README.md
"""

from __future__ import annotations

import argparse
import re
import sys

from . import _C

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool"]
REDUCE_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]
# Every c10d Backend method MCCL implements, by the torch.distributed call that reaches it.
COLLECTIVES = [
    ("all_reduce", "allreduce"),
    ("all_reduce_coalesced", "allreduce_coalesced"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("all_gather", "allgather"),
    ("all_gather_into_tensor", "_allgather_base"),
    ("all_gather_into_tensor (coalesced)", "allgather_into_tensor_coalesced"),
    ("all_gather_coalesced", "allgather_coalesced"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce_scatter", "reduce_scatter"),
    ("reduce_scatter_tensor", "_reduce_scatter_base"),
    ("reduce_scatter_tensor (coalesced)", "reduce_scatter_tensor_coalesced"),
    ("all_to_all", "alltoall"),
    ("all_to_all_single", "alltoall_base"),
    ("send / isend", "send"),
    ("recv / irecv", "recv"),
    ("recv (any source)", "recvAnysource"),
    ("barrier", "barrier"),
]
# What each device can do today, and where it ran.
DEVICES = [
    ("cpu", "yes", "all dtypes; tested on Linux x86-64 (CI)"),
    ("cuda", "yes", "staged through pinned host memory on a side stream (event-ordered, device-aware "
             "Future); every call, DDP and a mixed CUDA/CPU group tested on one H200 with torch 2.11 "
             "(docs/benchmarks.md); not in CI (no GPU there)"),
    ("mps", "written, unverified", "NOT YET RUN ON A MAC. c10d MPS kernels (one boxed kernel per op, "
            "registered at import where torch has none) tested on Linux against the schemas of "
            "torch 2.5 (as in 2.7) and 2.13; the adapter's ordering (fence on PyTorch's stream from the "
            "calling thread, Shared memory in place, Private through blits on MCCL's queue) tested "
            "on Linux through a fake Metal port in both storage modes with the whole collective "
            "suite; the Metal file (csrc/torch/device/mps_metal.mm) is only type-checked on Linux against "
            "stand-in headers (scripts/check_mm.sh), never built with Apple's SDK; torch >= 2.12 "
            "gives every MPS tensor Shared storage (zero copy), 2.5-2.11 Private (blits), as read "
            "from their sources (docs/mps.md); strided outputs need Shared storage; `mccl selftest` "
            "checks all of it on a Mac"),
]

BEGIN = "<!-- BEGIN GENERATED {name} (python -m mccl._docs --update README.md) -->"
END = "<!-- END GENERATED {name} -->"


def params_table() -> str:
    rows = ["| Setting | Type | Default | Range | What it does |", "|---|---|---|---|---|"]
    for p in _C.params():
        default = f"`{p['default']}`" if p["default"] != "" else "(unset)"
        rng = p["range"] or "—"
        rows.append(f"| `{p['name']}` | {p['type'].lower()} | {default} | {rng} | {p['doc']} |")
    return "\n".join(rows)


def reduce_table() -> str:
    rows = ["| dtype | " + " | ".join(REDUCE_OPS) + " |", "|---|" + "---|" * len(REDUCE_OPS)]
    for d in DTYPES:
        cells = ["yes" if _C.reduce_supported(d, op) else "—" for op in REDUCE_OPS]
        rows.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def collectives_table() -> str:
    rows = ["| torch.distributed call | Backend method | " + " | ".join(d for d, _, _ in DEVICES) + " |",
            "|---|---|" + "---|" * len(DEVICES)]
    for call, method in COLLECTIVES:
        rows.append(f"| `{call}` | `{method}` | " + " | ".join(s for _, s, _ in DEVICES) + " |")
    rows.append("")
    for d, s, note in DEVICES:
        rows.append(f"- **{d}**: {s} — {note}.")
    return "\n".join(rows)


TABLES = {"PARAMS": params_table, "REDUCE_SUPPORT": reduce_table, "COLLECTIVES": collectives_table}


def render(text: str) -> str:
    """`text` with every generated section replaced by the current table."""
    for name, fn in TABLES.items():
        pattern = re.compile(re.escape(BEGIN.format(name=name)) + r".*?" + re.escape(END.format(name=name)), re.S)
        block = BEGIN.format(name=name) + "\n" + fn() + "\n" + END.format(name=name)
        if not pattern.search(text):
            raise ValueError(f"section {name} is missing")
        text = pattern.sub(lambda _: block, text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", metavar="FILE", help="rewrite the generated sections of FILE")
    a = ap.parse_args(argv)
    if a.update:
        with open(a.update) as f:
            old = f.read()
        new = render(old)
        if new != old:
            with open(a.update, "w") as f:
                f.write(new)
        return 0
    for name, fn in TABLES.items():
        print(f"## {name}\n\n{fn()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
