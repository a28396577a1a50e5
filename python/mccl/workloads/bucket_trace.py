"""When DDP's gradient buckets become ready and when their all-reduces end.

A comm hook that does what DDP's default hook does (divide by the world
size, all-reduce) and records, per backward pass, each bucket's size, the
time backward handed it over and the time its all-reduce completed, all in
milliseconds after backward started. The tail — from the last bucket's
hand-over to the end of backward — is the communication no schedule can
hide: those gradients exist only once the first layer's backward is done.

Given the links' rate, it also computes the floor: the earliest time any
ring all-reduce (2(N-1)/N of each bucket's bytes over every host's link) could
finish this rank's buckets, given when they were handed over and taking the
links as busy from then on: max over buckets i, in hand-over order, of
ready_i + 2(N-1)/N * (bytes of i and every later bucket) / rate. How far the
last all-reduce ends after it is what a backend (and rank skew) adds. With
every rank's trace (gathered at the end) a bucket counts as ready when the
last rank handed it over, which takes rank skew out; that comparison of
ranks' clocks holds on one machine (the network lab) and to the clocks'
synchronisation (NTP: about a millisecond) across machines. Per bucket, the
same clock gives how long after the last rank's hand-over the median rank
and the last rank saw it reduced: a bucket whose last rank lags far more
than the others' shows where in the step ranks are held back.
"""

from __future__ import annotations

import statistics
import time

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook


class BucketTrace:
    def __init__(self, ddp):
        self.passes: list[dict] = []
        self._cur: dict | None = None
        ddp.register_comm_hook(None, self._hook)

    def begin(self) -> None:
        self._cur = {"t0": time.perf_counter(), "wall0": time.time(), "buckets": []}

    def end(self) -> None:
        cur, self._cur = self._cur, None
        if cur is None:
            return
        cur["end_ms"] = 1000 * (time.perf_counter() - cur["t0"])
        self.passes.append(cur)

    def clear(self) -> None:
        self.passes.clear()

    def _hook(self, state, bucket):
        cur = self._cur
        if cur is None:  # a backward outside begin()/end(): not timed
            return allreduce_hook(state, bucket)
        buf = bucket.buffer()
        t0 = cur["t0"]
        rec = {"index": bucket.index(), "bytes": buf.numel() * buf.element_size(),
               "ready_ms": 1000 * (time.perf_counter() - t0), "done_ms": None}
        cur["buckets"].append(rec)

        def done(fut):
            rec["done_ms"] = 1000 * (time.perf_counter() - t0)
            return fut.value()

        return allreduce_hook(state, bucket).then(done)

    @staticmethod
    def _last_ready(p: dict) -> float:
        return max((b["ready_ms"] for b in p["buckets"]), default=p["end_ms"])

    @staticmethod
    def _done(p: dict, b: dict) -> float:
        """When bucket b of pass p was reduced (the end of backward if unseen)."""
        return p["end_ms"] if b["done_ms"] is None else b["done_ms"]

    @staticmethod
    def floor_ms(buckets: list[dict], world: int, link_bytes_per_s: float) -> float:
        """The link floor of one pass (see the module's docstring)."""
        share = 2 * (world - 1) / world
        later, floor = 0.0, 0.0
        for b in sorted(buckets, key=lambda b: b["ready_ms"], reverse=True):
            later += b["bytes"]
            floor = max(floor, b["ready_ms"] + 1000 * share * later / link_bytes_per_s)
        return floor

    @staticmethod
    def _aligned(everyone: list[list[dict]]):
        """Each of rank 0's passes k as [(shift, pass k of a rank)] for every
        rank that has it (rank 0 first): shift, in ms, puts that rank's times
        on rank 0's clock of that pass."""
        for k, p0 in enumerate(everyone[0]):
            yield [(1000 * (r[k]["wall0"] - p0["wall0"]), r[k]) for r in everyone if k < len(r)]

    @staticmethod
    def merge(everyone: list[list[dict]]) -> tuple[list[dict], list[float]]:
        """Passes of every rank (rank 0 first) as one: a bucket is ready when
        the last rank handed it over and reduced when the last rank saw it
        done, in ms after rank 0's backward began. Also each pass's skew: the
        spread of the ranks' last hand-overs."""
        merged, skews = [], []
        for ranks in BucketTrace._aligned(everyone):
            by_index: dict[int, dict] = {}
            lasts = []
            for shift, p in ranks:
                lasts.append(shift + max((b["ready_ms"] for b in p["buckets"]), default=0.0))
                for b in p["buckets"]:
                    m = by_index.setdefault(b["index"], {"index": b["index"], "bytes": b["bytes"],
                                                         "ready_ms": -1e18, "done_ms": -1e18})
                    m["ready_ms"] = max(m["ready_ms"], shift + b["ready_ms"])
                    m["done_ms"] = max(m["done_ms"], shift + BucketTrace._done(p, b))
            merged.append({"buckets": list(by_index.values()),
                           "end_ms": max(shift + p["end_ms"] for shift, p in ranks)})
            skews.append(max(lasts) - min(lasts))
        return merged, skews

    @staticmethod
    def per_bucket(everyone: list[list[dict]]) -> list[dict]:
        """Every bucket's completion on each rank after the last rank handed
        it over, on one clock (ranks' passes as in merge): per bucket index,
        the median over passes of the median rank's and of the last rank's
        time, in ms. Where one bucket's last rank lags its median rank far
        more than the others', something at that point of the step (not the
        links) holds the ranks back."""
        per: dict[int, dict] = {}
        for ranks in BucketTrace._aligned(everyone):
            if len(ranks) < len(everyone):
                continue
            seen: dict[int, list[tuple[float, float]]] = {}
            for shift, p in ranks:
                for b in p["buckets"]:
                    seen.setdefault(b["index"], []).append(
                        (shift + b["ready_ms"], shift + BucketTrace._done(p, b)))
                    per.setdefault(b["index"], {"index": b["index"], "bytes": b["bytes"], "median": [], "last": []})
            for index, marks in seen.items():
                if len(marks) < len(ranks):
                    continue
                last_ready = max(r for r, _ in marks)
                after = [d - last_ready for _, d in marks]
                per[index]["median"].append(statistics.median(after))
                per[index]["last"].append(max(after))
        return [{"index": b["index"], "bytes": b["bytes"], "median_rank_ms": statistics.median(b["median"]),
                 "last_rank_ms": statistics.median(b["last"])}
                for b in sorted(per.values(), key=lambda b: b["index"]) if b["median"]]

    def summary(self, world: int = 0, link_bytes_per_s: float = 0.0, everyone: list | None = None) -> dict:
        """The last pass's buckets, and medians over all passes of the tail
        and (with the world size and link rate) of the time over the floor;
        with `everyone` (each rank's passes, rank 0's first) also the time
        over the floor of the merged passes and the ranks' skew."""
        if not self.passes:
            return {}
        tails, over = [], []
        for p in self.passes:
            tails.append(p["end_ms"] - self._last_ready(p))
            if world > 1 and link_bytes_per_s > 0 and p["buckets"]:
                done = max(self._done(p, b) for b in p["buckets"])
                over.append(done - self.floor_ms(p["buckets"], world, link_bytes_per_s))
        p = self.passes[-1]
        last = self._last_ready(p)
        pending = sum(b["bytes"] for b in p["buckets"] if b["done_ms"] is None or b["done_ms"] > last)
        out = {"tail_ms": statistics.median(tails), "passes": len(self.passes), "backward_ms": p["end_ms"],
               "pending_at_last_ready_bytes": pending,
               "buckets": [{k: b[k] for k in ("index", "bytes", "ready_ms", "done_ms")} for b in p["buckets"]]}
        if over:
            out.update(link_gbit=8 * link_bytes_per_s / 1e9, over_floor_ms=statistics.median(over),
                       floor_ms=self.floor_ms(p["buckets"], world, link_bytes_per_s))
        if over and everyone and len(everyone) > 1:
            merged, skews = self.merge(everyone)
            out["skew_ms"] = statistics.median(skews)
            out["over_floor_all_ranks_ms"] = statistics.median(
                max(b["done_ms"] for b in m["buckets"]) - self.floor_ms(m["buckets"], world, link_bytes_per_s)
                for m in merged if m["buckets"])
            out["per_bucket_all_ranks"] = self.per_bucket(everyone)
        return out

    @staticmethod
    def render(s: dict) -> str:
        lines = [f"# DDP buckets of the last timed backward ({s['backward_ms']:.1f} ms; times after it began):"]
        for b in s["buckets"]:
            done = f"{b['done_ms']:7.1f}" if b["done_ms"] is not None else "      -"
            took = f"{b['done_ms'] - b['ready_ms']:6.1f}" if b["done_ms"] is not None else "     -"
            lines.append(f"#   bucket {b['index']:3d} {b['bytes'] / 1e6:7.2f} MB  ready {b['ready_ms']:7.1f}  "
                         f"reduced {done}  ({took} ms)")
        lines.append(f"# tail after the last bucket was ready: {s['tail_ms']:.1f} ms (median of {s['passes']} "
                     f"passes); {s['pending_at_last_ready_bytes'] / 1e6:.2f} MB not yet reduced at that point")
        if "over_floor_ms" in s:
            lines.append(f"# link floor at {s['link_gbit']:.3g} Gbit/s: the last pass's all-reduces could end at "
                         f"{s['floor_ms']:.1f} ms at the earliest; they ended {s['over_floor_ms']:.1f} ms after "
                         f"their floor (median of the passes)")
        if "over_floor_all_ranks_ms" in s:
            lines.append(f"# with every rank's hand-overs (the last rank's counts; ranks' last hand-overs "
                         f"{s['skew_ms']:.1f} ms apart): {s['over_floor_all_ranks_ms']:.1f} ms after the floor")
        per = s.get("per_bucket_all_ranks")
        if per:
            med = [b["median_rank_ms"] for b in per]
            last = [b["last_rank_ms"] for b in per]
            wide = max(per, key=lambda b: b["last_rank_ms"] - b["median_rank_ms"])
            lines.append(f"# each bucket after the last rank handed it over (medians of the passes): reduced on "
                         f"the median rank {min(med):.1f}-{max(med):.1f} ms later, on the last rank "
                         f"{min(last):.1f}-{max(last):.1f} ms; widest apart: bucket {wide['index']} "
                         f"({wide['median_rank_ms']:.1f} and {wide['last_rank_ms']:.1f} ms)")
        return "\n".join(lines)
