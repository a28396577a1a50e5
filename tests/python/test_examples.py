"""The ViT example (the headline workload) and mccl-bench matmul."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import needs_cpu_fsdp2
from mccl.bench.scaling import _result  # the workload's RESULT line, parsed as the bench does
from mccl.launch import run

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "examples" / "train_vit.py"  # wrapper around mccl.workloads.vit


def test_default_vit_has_the_reference_parameter_count():
    from mccl.workloads import vit

    model = vit.build("vit-113m")
    assert sum(p.numel() for p in model.parameters()) == 113_503_498


def test_small_deep_has_the_references_shape_at_smalls_size():
    """small-deep: the reference's 16 blocks, its first block (the last
    gradients of backward) as small a share of the parameters, and about as
    many bytes of gradients as small."""
    from mccl.workloads import vit

    def shares(name):
        # A one-block model of the preset's width gives the parameters
        # outside the blocks and those of one block (no 113 M build).
        width, depth, *rest = vit.PRESETS[name]
        one = vit.ViT(width, 1, *rest)
        block = sum(p.numel() for p in one.blocks[0].parameters())
        total = sum(p.numel() for p in one.parameters()) + (depth - 1) * block
        return depth, total, block / total

    ref_depth, ref_total, ref_first = shares("vit-113m")
    deep_depth, deep_total, deep_first = shares("small-deep")
    _, small_total, small_first = shares("small")
    assert ref_total == 113_503_498 and deep_total == sum(p.numel() for p in vit.build("small-deep").parameters())
    assert deep_depth == ref_depth == 16
    assert abs(deep_first - ref_first) < 0.005 < small_first - ref_first
    assert abs(deep_total / small_total - 1) < 0.05


def test_small_deep_lean_is_small_deep_on_fewer_tokens():
    """small-deep-lean: small-deep's blocks, embedding and head (only the
    position rows differ) on 5 tokens, for labs whose ranks share cores."""
    from mccl.workloads import vit

    deep, lean = vit.build("small-deep"), vit.build("small-deep-lean")
    shapes = {n: p.shape for n, p in deep.named_parameters() if n != "pos"}
    assert shapes == {n: p.shape for n, p in lean.named_parameters() if n != "pos"}
    assert lean.pos.shape[1] == 5 and deep.pos.shape[1] == 65
    image = vit.PRESETS["small-deep-lean"][5]
    assert lean(torch.randn(2, 3, image, image)).shape == (2, 10)


@pytest.mark.slow
def test_vit_trains_over_mccl_and_reports_overlap():
    res = run([sys.executable, str(VIT), "--preset", "tiny", "--steps", "3", "--warmup", "1", "--batch", "8",
               "--measure-overlap", "--threads", "1", "--quiet"], 2, timeout=240, env={"OMP_NUM_THREADS": "1"})
    out = res[0].output
    result = _result(out)
    assert result["world"] == 2 and result["backend"] == "mccl"
    assert result["samples_per_s"] > 0 and math.isfinite(result["final_loss"])
    assert 0.0 <= result["hidden_share"] <= 1.0
    assert result["allreduce_s"] > 0 and result["step_nosync_s"] > 0


@needs_cpu_fsdp2
@pytest.mark.slow
def test_vit_trains_with_fsdp_like_gloo():
    # FSDP2 (all-gather + reduce-scatter per block) on an odd world: the same
    # data and initial weights give the same loss over MCCL as over Gloo.
    losses = {}
    for backend in ("mccl", "gloo"):
        res = run([sys.executable, str(VIT), "--preset", "tiny", "--steps", "3", "--warmup", "1", "--batch", "4",
                   "--fsdp", "--backend", backend, "--threads", "1", "--quiet"], 3, timeout=240,
                  env={"OMP_NUM_THREADS": "1"})
        out = res[0].output
        result = _result(out)
        assert result["fsdp"] is True and result["world"] == 3 and "hidden_share" not in result
        losses[backend] = result["final_loss"]
    assert math.isfinite(losses["mccl"])
    assert abs(losses["mccl"] - losses["gloo"]) <= 1e-4 * max(1.0, abs(losses["gloo"])), losses


@pytest.mark.slow
def test_vit_traces_ddp_buckets():
    # --trace-buckets swaps in a hook that does DDP's default (average by
    # all-reduce) and times each bucket: the same loss as without it, every
    # gradient byte in some bucket, each reduced after it was ready and
    # before backward returned.
    base = [sys.executable, str(VIT), "--preset", "tiny", "--steps", "3", "--warmup", "1", "--batch", "4",
            "--bucket-mb", "0.01", "--emulate-ms", "30", "--threads", "1", "--quiet"]
    results = []
    for extra in ([], ["--trace-buckets", "--link-gbit", "100"]):
        res = run(base + extra, 3, timeout=240, env={"OMP_NUM_THREADS": "1"})
        out = res[0].output
        results.append(_result(out))
    plain, traced = results
    assert "bucket_trace" not in plain
    assert abs(traced["final_loss"] - plain["final_loss"]) <= 1e-5 * max(1.0, abs(plain["final_loss"]))
    t = traced["bucket_trace"]
    assert t["passes"] == 3 and len(t["buckets"]) > 3
    assert sum(b["bytes"] for b in t["buckets"]) == 4 * traced["params"]
    for b in t["buckets"]:
        assert 0 <= b["ready_ms"] <= b["done_ms"] <= t["backward_ms"], b
    assert 0 <= t["tail_ms"] and "# tail after the last bucket was ready" in out
    assert t["link_gbit"] == 100 and t["floor_ms"] >= max(b["ready_ms"] for b in t["buckets"])
    assert "over_floor_ms" in t and "# link floor at 100 Gbit/s" in out
    assert t["skew_ms"] >= 0 and "over_floor_all_ranks_ms" in t and "with every rank's hand-overs" in out
    per = t["per_bucket_all_ranks"]
    assert sorted(b["index"] for b in per) == sorted(b["index"] for b in t["buckets"])
    assert all(b["last_rank_ms"] >= b["median_rank_ms"] for b in per) and "# each bucket after the last rank" in out
    # Every rank's passes, the same buckets on each (rank 0's last pass as in the summary).
    ranks = traced["bucket_trace_ranks"]
    assert len(ranks) == 3 and all(len(passes) == 3 for passes in ranks)
    assert sorted(b[0] for b in ranks[0][-1]["buckets"]) == sorted(b["index"] for b in t["buckets"])
    for passes in ranks:
        for p in passes:
            assert sum(b[1] for b in p["buckets"]) == 4 * traced["params"]
            assert all(0 <= b[2] <= b[3] <= p["end_ms"] for b in p["buckets"]), p


def test_bucket_trace_link_floor():
    from mccl.workloads.bucket_trace import BucketTrace
    mb = 1_000_000
    # 2 ranks at 1e8 B/s: a ring all-reduce of 1 MB takes 10 ms on the links.
    both_early = [{"ready_ms": 0.0, "bytes": mb}, {"ready_ms": 5.0, "bytes": mb}]
    assert BucketTrace.floor_ms(both_early, 2, 1e8) == 20.0  # back to back from 0
    late = [{"ready_ms": 0.0, "bytes": mb}, {"ready_ms": 50.0, "bytes": mb}]
    assert BucketTrace.floor_ms(late, 2, 1e8) == 60.0  # the last one alone decides
    # 4 ranks send 2 * 3/4 of every byte
    assert BucketTrace.floor_ms(late, 4, 1e8) == 65.0


def test_bucket_trace_merges_ranks_on_their_clocks():
    from mccl.workloads.bucket_trace import BucketTrace
    r0 = [{"wall0": 100.0, "end_ms": 30.0, "buckets": [{"index": 0, "bytes": 8, "ready_ms": 5.0, "done_ms": 20.0},
                                                        {"index": 1, "bytes": 4, "ready_ms": 12.0, "done_ms": 29.0}]}]
    # rank 1 began its backward 10 ms later and handed bucket 1 over 2 ms before rank 0 did (its clock)
    r1 = [{"wall0": 100.010, "end_ms": 22.0, "buckets": [{"index": 1, "bytes": 4, "ready_ms": 10.0, "done_ms": 19.0},
                                                          {"index": 0, "bytes": 8, "ready_ms": 1.0, "done_ms": None}]}]
    (m,), (skew,) = BucketTrace.merge([r0, r1])
    got = {b["index"]: (b["bytes"], b["ready_ms"], b["done_ms"]) for b in m["buckets"]}
    assert got[0] == (8, pytest.approx(11.0), pytest.approx(32.0))  # rank 1's ready; its end for "not seen done"
    assert got[1] == (4, pytest.approx(20.0), pytest.approx(29.0))
    assert m["end_ms"] == pytest.approx(32.0) and skew == pytest.approx(8.0)  # last hand-overs at 12 and 20


def test_bucket_trace_per_bucket_after_the_last_hand_over():
    from mccl.workloads.bucket_trace import BucketTrace

    def rank(wall0, ready0, done0, ready1, done1):
        return {"wall0": wall0, "end_ms": 100.0, "buckets": [
            {"index": 0, "bytes": 8, "ready_ms": ready0, "done_ms": done0},
            {"index": 1, "bytes": 4, "ready_ms": ready1, "done_ms": done1}]}
    # Two passes of three ranks; rank 2 began each backward 5 ms after the others.
    everyone = [
        [rank(10.000, 1.0, 11.0, 20.0, 30.0), rank(20.000, 1.0, 12.0, 20.0, 31.0)],
        [rank(10.000, 2.0, 12.0, 20.0, 40.0), rank(20.000, 2.0, 11.0, 20.0, 33.0)],
        [rank(10.005, 0.0, 6.0, 19.0, 20.0), rank(20.005, 0.0, 6.0, 19.0, None)],  # None: its end, 100
    ]
    got = {b["index"]: b for b in BucketTrace.per_bucket(everyone)}
    # bucket 0, pass 0: last hand-over at 5 (rank 2, 0 + 5); done at 11, 12, 11 -> after 6, 7, 6
    # pass 1: last hand-over at 5; done at 12, 11, 11 -> 7, 6, 6. Medians of the passes: 6 and 7.
    assert got[0]["median_rank_ms"] == pytest.approx(6.0) and got[0]["last_rank_ms"] == pytest.approx(7.0)
    # bucket 1, pass 0: last hand-over at 24 (rank 2); done 30, 40, 25 -> 6, 16, 1 (median 6, last 16)
    # pass 1: done 31, 33, 105 -> 7, 9, 81 (median 9, last 81)
    assert got[1]["median_rank_ms"] == pytest.approx(7.5) and got[1]["last_rank_ms"] == pytest.approx(48.5)
    assert got[1]["bytes"] == 4
    # A pass that not every rank has is left out.
    assert BucketTrace.per_bucket([everyone[0], everyone[1][:1]]) == [
        {"index": 0, "bytes": 8, "median_rank_ms": pytest.approx(9.5), "last_rank_ms": pytest.approx(10.0)},
        {"index": 1, "bytes": 4, "median_rank_ms": pytest.approx(15.0), "last_rank_ms": pytest.approx(20.0)}]


@pytest.mark.slow
def test_matmul_reports_every_precision(tmp_path):
    out = tmp_path / "mm.json"
    p = subprocess.run([sys.executable, "-m", "mccl.bench", "matmul", "--device", "cpu", "-n", "256",
                        "--repeats", "2", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["dtype"] for r in rows] == ["fp32", "tf32", "bf16"]
    assert all(r["tflops"] > 0 for r in rows)
    assert "TFLOP/s" in p.stdout


class _FakeClock:
    """Stands in for the `time` module of mccl.workloads.vit: sleep() and the
    host's work (work()) advance a virtual clock, so the queue's timeline is
    checked exactly."""

    def __init__(self):
        self.now, self.slept = 100.0, []

    def perf_counter(self):
        return self.now

    def sleep(self, s):
        assert s >= 0
        self.slept.append(s)
        self.now += s

    def work(self, s):
        self.now += s


@pytest.fixture
def fake_clock_queue(monkeypatch):
    """A DeviceQueue on a _FakeClock, restarted at the clock's start."""
    from mccl.workloads import vit

    clock = _FakeClock()
    monkeypatch.setattr(vit, "time", clock)
    q = vit.DeviceQueue()
    q.restart()
    return clock, q


def test_device_queue_hides_host_work_behind_device_blocks(fake_clock_queue):
    clock, q = fake_clock_queue
    start = clock.now
    for _ in range(4):  # the host works 5 ms on each 20 ms block: the blocks alone set the pace
        clock.work(0.005)
        q.run(0.020)
    assert clock.now == pytest.approx(start + 0.080)
    # A host 50 ms late (descheduled) finds the device idle: no wait, the
    # next block starts from there, and the lateness is not made up twice.
    clock.work(0.050)
    sleeps = len(clock.slept)
    q.run(0.020)
    assert clock.now == pytest.approx(start + 0.130) and len(clock.slept) == sleeps
    clock.work(0.001)
    q.run(0.020)
    assert clock.now == pytest.approx(start + 0.150)
    # Host work that outlasts every block is what the step takes.
    clock.work(0.030)
    q.run(0.020)
    assert clock.now == pytest.approx(start + 0.180)
    # restart(): the device's inputs exist only now, so its next block runs
    # a whole block's time from here.
    clock.work(0.100)
    q.restart()
    clock.work(0.004)
    q.run(0.020)
    assert clock.now == pytest.approx(start + 0.300)


def test_device_queue_matches_plain_sleeps_without_host_work(fake_clock_queue):
    # With no host work between blocks the queue and plain sleeps agree: the
    # emulated device time per step is the same in both modes.
    clock, q = fake_clock_queue
    start = clock.now
    for s in (0.01, 0.02, 0.03):
        q.run(s)
    assert clock.now == pytest.approx(start + 0.06)
    assert clock.slept == pytest.approx([0.01, 0.02, 0.03])


@pytest.mark.slow
def test_vit_emulate_queue_one_rank_and_ddp():
    # --emulate-queue: one rank's step still takes at least the device's
    # 200 ms, and the flags are recorded; over DDP the loss is the same as
    # without the queue (the queue changes timing only; how much host work it
    # hides is checked on the virtual clock above, not timed here).
    base = [sys.executable, str(VIT), "--preset", "tiny", "--steps", "3", "--warmup", "1", "--batch", "4",
            "--emulate-ms", "200", "--threads", "1", "--quiet", "--optimizer", "adamw-fused"]
    res = {}
    for mode in ("plain", "queue"):
        p = subprocess.run(base + (["--emulate-queue"] if mode == "queue" else []), capture_output=True,
                           text=True, timeout=240)
        assert p.returncode == 0, p.stderr[-2000:]
        res[mode] = _result(p.stdout)
    assert res["queue"]["emulate_queue"] is True and res["plain"]["emulate_queue"] is False
    assert res["queue"]["optimizer"] == "adamw-fused"
    assert res["queue"]["step_s"] >= 0.200 and res["plain"]["step_s"] >= 0.200
    assert res["queue"]["final_loss"] == pytest.approx(res["plain"]["final_loss"], rel=1e-6)
    ddp = []
    for extra in ([], ["--emulate-queue"]):
        r = run(base + ["--bucket-mb", "0.01"] + extra, 3, timeout=240, env={"OMP_NUM_THREADS": "1"})
        out = r[0].output
        ddp.append(_result(out))
    assert ddp[1]["emulate_queue"] and ddp[1]["step_s"] >= 0.200
    assert ddp[1]["final_loss"] == pytest.approx(ddp[0]["final_loss"], rel=1e-5)


@pytest.mark.slow
def test_vit_emulate_queue_is_refused_without_device_time_or_with_fsdp():
    for extra, words in ((["--emulate-queue"], "--emulate-queue: give the device's time with --emulate-ms"),
                         (["--emulate-queue", "--emulate-ms", "10", "--fsdp"], "--emulate-queue models DDP's step")):
        p = subprocess.run([sys.executable, str(VIT), "--preset", "tiny", "--steps", "1", *extra],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and words in p.stderr, p.stderr


def test_vit_drives_the_device_queue_block_by_block(monkeypatch):
    # How the workload uses the queue: every block's forward and backward
    # time goes through run() (a third and two thirds of the block's share),
    # and the device restarts once per step, after backward (the gradients
    # are synchronised), and once after the barrier before the timed steps.
    from mccl.workloads import vit

    calls = []

    class Recording(vit.DeviceQueue):
        def run(self, s):
            calls.append(("run", round(s, 6)))
            super().run(s)

        def restart(self):
            calls.append(("restart",))
            super().restart()

    monkeypatch.setattr(vit, "DeviceQueue", Recording)
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert vit.main(["--preset", "tiny", "--steps", "3", "--warmup", "1", "--batch", "2", "--emulate-ms", "30",
                     "--emulate-queue", "--threads", "1", "--quiet"]) == 0
    depth = vit.PRESETS["tiny"][1]
    fwd, bwd = round(0.030 / depth / 3, 6), round(2 * 0.030 / depth / 3, 6)
    step = [("run", fwd)] * depth + [("run", bwd)] * depth + [("restart",)]
    assert calls == step + [("restart",)] + 3 * step, calls
