"""mccl-bench trace-report DIR: where the time of small collectives goes,
from the event traces that MCCL_TRACE_DIR=DIR makes (one file per process,
written at exit; csrc/core/util/trace.h lists the events). All the files
must come from one machine: their timestamps are CLOCK_MONOTONIC.

For the group with the most ops (or --group), over its ops of the most
common kind and algorithm that every rank started and ended without error
(the first tenth dropped as warm-up; failed ops, missing ranks and dropped
events are named as warnings), it reports:

- each op's span (first start to last end) and the spread of its starts and
  of its ends across the ranks;
- the turnaround on each rank from an op's end to the next op's start, cut
  at the torch Work's completion, the return of Work.wait(), the next call's
  entry into MCCL and its submission;
- for recursive doubling, per round: the rank's own send (posting it, the
  inline write included), the partner's post to this rank's reading of its
  frame, that frame's reading to the op resuming, how far apart the two
  partners posted, and how often the op resumed on the thread that read the
  frame (frames are matched to rounds by the sender's rank in the group).
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import statistics
from collections import defaultdict

EVENTS = ("op_start", "op_end", "round_posted", "round_sent", "round_resumed", "frame_read",
          "work_done", "wait_returned", "call_entered", "submitted")
HEADER = "# mccl trace 1 "
WARMUP_FRACTION = 0.1


class TraceError(ValueError):
    pass


def read_file(path: str) -> tuple[list[tuple], int]:
    """The events of one file as (t_ns, event, who, group, seq, slot, tid),
    in time order, and how many events its header says were dropped; a
    malformed file raises TraceError naming the line."""
    events = []
    with open(path) as f:
        first = f.readline()
        if not first.startswith(HEADER):
            raise TraceError(f"{path}: not an MCCL trace (first line {first.strip()!r})")
        dropped = [field[len("dropped="):] for field in first.split() if field.startswith("dropped=")]
        if len(dropped) != 1 or not dropped[0].isdigit():
            raise TraceError(f"{path}:1: malformed header {first.strip()!r}")
        for no, line in enumerate(f, start=2):
            if line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 7 or parts[1] not in EVENTS:
                raise TraceError(f"{path}:{no}: malformed event {line.strip()!r}")
            try:
                t, who, group, seq, slot, tid = (int(parts[i]) for i in (0, 2, 3, 4, 5, 6))
            except ValueError:
                raise TraceError(f"{path}:{no}: malformed event {line.strip()!r}") from None
            events.append((t, parts[1], who, group, seq, slot, tid))
    events.sort()
    return events, int(dropped[0])


def _stats(values: list[float]) -> dict:
    q = sorted(values)
    return {"median_us": statistics.median(q), "p10_us": q[len(q) // 10], "p90_us": q[9 * len(q) // 10],
            "n": len(q)}


def _names() -> tuple[dict, dict]:
    """The op kinds' and algorithms' names by number (op_start's slot is
    kind << 8 | algorithm), from the installed library."""
    try:
        from .. import _C
        kinds, algos = _C._trace_names()
        return dict(kinds), dict(algos)
    except (ImportError, AttributeError):
        return {}, {}


def analyze(directory: str, group: int | None = None) -> dict:
    files = sorted(glob.glob(os.path.join(directory, "mccl-trace-*.txt")))
    if not files:
        raise TraceError(f"{directory}: no mccl-trace-*.txt files (was MCCL_TRACE_DIR set, and did the ranks exit?)")
    traces, warnings = [], []
    for path in files:
        events, dropped = read_file(path)
        traces.append(events)
        if dropped:
            warnings.append(f"{os.path.basename(path)}: {dropped} events were dropped (the buffer was full, "
                            f"or the process exited while recording them)")
    ops_per_group: dict[int, int] = defaultdict(int)
    for ev in traces:
        for e in ev:
            if e[1] == "op_start":
                ops_per_group[e[3]] += 1
    if not ops_per_group:
        raise TraceError(f"{directory}: the traces hold no collective")
    if group is None:
        group = max(ops_per_group, key=ops_per_group.get)
    elif group not in ops_per_group:
        raise TraceError(f"{directory}: no op of group {group} (groups: {sorted(ops_per_group)})")

    ranks: dict[int, list[tuple]] = {}
    for path, ev in zip(files, traces):
        whos = {e[2] for e in ev if e[1] == "op_start" and e[3] == group}
        if not whos:
            continue
        if len(whos) > 1:
            raise TraceError(f"{path}: ops of group {group} as ranks {sorted(whos)} in one process")
        rank = whos.pop()
        if rank in ranks:
            raise TraceError(f"{path}: a second trace of rank {rank} of group {group}")
        ranks[rank] = [e for e in ev if e[3] == group]
    n = len(ranks)
    if sorted(ranks) != list(range(max(ranks) + 1)):
        missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
        warnings.append(f"no trace of rank(s) {missing} of group {group}: their ops are left out")

    at: dict[tuple, tuple] = {}  # (rank, event, peer, seq, slot) -> (t_ns, tid): rounds and frames
    start: dict[tuple, tuple] = {}  # (rank, seq) -> (t_ns, kind << 8 | algorithm)
    end: dict[tuple, tuple] = {}  # (rank, seq) -> (t_ns, 1 if the op failed)
    for rank, ev in ranks.items():
        for t, name, who, g, seq, slot, tid in ev:
            if name == "op_start":
                start.setdefault((rank, seq), (t, slot))
            elif name == "op_end":
                end.setdefault((rank, seq), (t, slot))
            elif name.startswith("round_") or name == "frame_read":
                at.setdefault((rank, name, who, seq, slot), (t, tid))
    # Ops every rank started and ended without error, of the most common kind
    # and algorithm among them.
    complete = defaultdict(set)
    for (rank, seq), (t, slot) in start.items():
        if (rank, seq) in end and end[(rank, seq)][1] == 0:
            complete[(seq, slot)].add(rank)
    whole = {seq: slot for (seq, slot), rs in complete.items() if len(rs) == n}
    failed = len({seq for (rank, seq), (t, bad) in end.items() if bad})
    if failed:
        warnings.append(f"{failed} failed op(s) left out")
    if not whole:
        raise TraceError(f"{directory}: no op of group {group} that all {n} ranks started and ended without error")
    counts = defaultdict(int)
    for slot in whole.values():
        counts[slot] += 1
    kind_algo = max(counts, key=counts.get)
    seqs = sorted(seq for seq, slot in whole.items() if slot == kind_algo)
    seqs = seqs[int(len(seqs) * WARMUP_FRACTION):]
    if not seqs:
        raise TraceError(f"{directory}: too few ops of group {group} to report")
    kinds, algos = _names()
    kind, algo = kind_algo >> 8, kind_algo & 0xFF
    us = 1e-3

    spans, start_spread, end_spread = [], [], []
    for s in seqs:
        starts = [start[(r, s)][0] for r in ranks]
        ends = [end[(r, s)][0] for r in ranks]
        spans.append((max(ends) - min(starts)) * us)
        start_spread.append((max(starts) - min(starts)) * us)
        end_spread.append((max(ends) - min(ends)) * us)

    # Turnaround: the first of each event after op_end(s), before op_start(s+1).
    steps = ("work_done", "wait_returned", "call_entered", "submitted", "op_start")
    turn: dict[str, list[float]] = defaultdict(list)
    chosen = set(seqs)
    for rank, ev in ranks.items():
        times = [e[0] for e in ev]
        for s in seqs:
            if s + 1 not in chosen:
                continue
            t_end = end[(rank, s)][0]
            t_next = start[(rank, s + 1)][0]
            first = {}
            for e in ev[bisect.bisect_right(times, t_end):]:
                if e[0] > t_next:
                    break
                if e[1] in steps and e[1] not in first:
                    first[e[1]] = e[0]
            prev_name, prev_t = "op_end", t_end
            for name in steps:
                if name in first:
                    turn[f"{prev_name} -> {name}"].append((first[name] - prev_t) * us)
                    prev_name, prev_t = name, first[name]
            turn["op_end -> next op_start"].append((t_next - t_end) * us)

    rounds: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    fold: dict[str, list[float]] = defaultdict(list)
    for s in seqs:
        for r in ranks:
            prev = None
            k = 1
            while True:
                posted = [key for key in ((r, "round_posted", p, s, k) for p in ranks) if key in at]
                if not posted:
                    break
                p = posted[0][2]
                t_post = at[posted[0]][0]
                sent = at.get((r, "round_sent", p, s, k))
                resumed = at.get((r, "round_resumed", p, s, k))
                if not sent or not resumed:
                    break  # the op failed in this round (left out above) or the buffer was full
                t_sent, (t_res, res_tid) = sent[0], resumed
                row = rounds[k]
                if prev is None:
                    fold["op_start -> round 1 posted"].append((t_post - start[(r, s)][0]) * us)
                row["round (resumed - previous resumed)"].append((t_res - (prev if prev is not None else t_post)) * us)
                row["own send"].append((t_sent - t_post) * us)
                read = at.get((r, "frame_read", p, s, k))
                p_post = at.get((p, "round_posted", r, s, k))
                if read and p_post:
                    row["partner posted -> frame read"].append((read[0] - p_post[0]) * us)
                    row["frame read -> resumed"].append((t_res - max(read[0], t_sent)) * us)
                    row["partner's post apart from this rank's"].append(abs(p_post[0] - t_post) * us)
                    row["resumed on the reading thread (share)"].append(1.0 if read[1] == res_tid else 0.0)
                prev = t_res
                k += 1
            if prev is not None:
                fold["last round resumed -> op_end"].append((end[(r, s)][0] - prev) * us)

    def table(d):
        return {name: ({"share": sum(v) / len(v), "n": len(v)} if name.endswith("(share)") else _stats(v))
                for name, v in d.items() if v}

    return {
        "group": group,
        "ranks": n,
        "op": kinds.get(kind, f"op kind {kind}"),
        "algorithm": algos.get(algo, f"algorithm {algo}"),
        "ops": len(seqs),
        "warnings": warnings,
        "op_span": _stats(spans),
        "start_spread": _stats(start_spread),
        "end_spread": _stats(end_spread),
        "turnaround": table(turn),
        "recursive_doubling_rounds": {str(k): table(v) for k, v in sorted(rounds.items())},
        "recursive_doubling_fold": table(fold),
    }


def format_report(rep: dict) -> str:
    lines = [f"group {rep['group']}: {rep['ranks']} ranks, {rep['ops']} ops of {rep['op']} by {rep['algorithm']} "
             f"(times in µs: median [p10, p90])"]
    lines += [f"warning: {w}" for w in rep["warnings"]]

    def row(name, st):
        if "share" in st:
            return f"  {name:44s} {100 * st['share']:7.0f} %"
        return f"  {name:44s} {st['median_us']:8.1f}  [{st['p10_us']:.1f}, {st['p90_us']:.1f}]"
    lines.append("per op:")
    for key, name in (("op_span", "span (first start .. last end)"), ("start_spread", "spread of the starts"),
                      ("end_spread", "spread of the ends")):
        lines.append(row(name, rep[key]))
    lines.append("turnaround on each rank (an op's end to its next op's start):")
    lines += [row(name, st) for name, st in rep["turnaround"].items()]
    for k, tab in rep["recursive_doubling_rounds"].items():
        lines.append(f"recursive doubling, round {k}:")
        lines += [row(name, st) for name, st in tab.items()]
    if rep["recursive_doubling_fold"]:
        lines.append("recursive doubling, around the rounds (fold in and out included):")
        lines += [row(name, st) for name, st in rep["recursive_doubling_fold"].items()]
    return "\n".join(lines)


def run(args) -> int:
    try:
        rep = analyze(args.dir, args.group)
    except (TraceError, OSError) as e:
        raise SystemExit(f"mccl-bench trace-report: {e}")
    print(format_report(rep))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
    return 0
