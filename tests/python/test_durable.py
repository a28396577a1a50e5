"""mccl.elastic.durable: atomic, verified checkpoints and the background saver.

In-process and fast, except the two SIGKILL tests (one writer subprocess
each). test_snapshot_stall_100mb prints the stall and write time it measures
(pytest -s to see them) and asserts only correctness.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import mccl.elastic.durable as durable
from mccl.elastic.durable import (BackgroundSaver, Checkpoints, CorruptCheckpoint, load_latest_state, load_state,
                                  save_state)

LOG = "mccl.elastic.durable"


def training_state(seed: int = 0) -> dict:
    """What State.state_dict() holds: model, optimizer with moments, and plain Python objects."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        model(torch.randn(4, 7)).square().sum().backward()
        opt.step()
        opt.zero_grad()
    return {"model": model.state_dict(), "optim": opt.state_dict(), "step": 17 + seed,
            "sampler": {"epoch": 3, "order": [5, 2, 9], "seen": (1, 2)},
            "extra": {"name": "vit", "hist": [1e-3, 5e-4], "nested": {"t": torch.tensor([1, -2]), "b": b"\0\xff",
                                                                     "none": None}},
            "odd": {"bf16": torch.randn(3, 3).to(torch.bfloat16), "bool": torch.tensor([True, False]),
                    "neg0": torch.tensor(-0.0), "nan": torch.tensor([float("nan"), float("inf")]),
                    "transposed": torch.arange(12.0).view(3, 4).t(), "empty": torch.empty(0, 4)}}


def assert_same(a, b, where: str = "state") -> None:
    """Equal in type, structure and every bit (NaN and -0.0 included)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype} {a.shape} vs {b.dtype} {b.shape}"
        bits = [x.detach().contiguous().view(-1).view(torch.uint8) for x in (a, b)]
        assert torch.equal(*bits), f"{where}: the bits differ"
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)}"
        assert getattr(a, "_metadata", None) == getattr(b, "_metadata", None), f"{where}: _metadata"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def steps_on_disk(root: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in root.iterdir() if p.name.startswith("step-"))


def folder(root: Path, step: int) -> Path:
    (path,) = [p for p in root.iterdir() if p.name.startswith(f"step-{step:09d}-")]
    return path


def ref_of(ckpts: Checkpoints, step: int):
    (ref,) = [ref for _, ref, _ in ckpts.scan() if ref is not None and ref.step == step]
    return ckpts.verify(ref)


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG and r.levelno == logging.WARNING]


# ---- round trip ---------------------------------------------------------------
def test_round_trip_is_bit_exact_and_manifest_complete(tmp_path):
    state = training_state()
    ckpts = Checkpoints(tmp_path, job_id="vit")
    ref = save_state(ckpts, 17, state, kind="dormant", meta={"world": 3, "why": "morning"})
    got = ckpts.latest()
    assert (got.path, got.step, got.kind, got.meta, got.job_id) == (ref.path, 17, "dormant",
                                                                    {"world": 3, "why": "morning"}, "vit")
    assert_same(state, load_state(got))

    m = json.loads((ref.path / durable.MANIFEST).read_text())
    assert (m["version"], m["job_id"], m["step"], m["kind"], m["pid"]) == (1, "vit", 17, "dormant", os.getpid())
    assert m["host"] and abs(m["created"] - time.time()) < 60
    data = (ref.path / "state.pt").read_bytes()
    assert m["files"] == {"state.pt": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
    assert sorted(p.name for p in tmp_path.iterdir()) == [ref.path.name], "nothing but the checkpoint is left"
    assert Checkpoints(tmp_path / "not-yet").latest() is None

    # The loaded state drives a fresh model and optimizer.
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    back = load_state(got)
    model.load_state_dict(back["model"])
    opt.load_state_dict(back["optim"])
    assert_same(state["optim"]["state"], opt.state_dict()["state"])


def test_round_trip_through_the_background_saver(tmp_path):
    state = training_state(1)
    saver = BackgroundSaver(Checkpoints(tmp_path))
    assert saver.snapshot_and_save(18, state, kind="stopped", meta={"k": [1]})
    ref = saver.wait()
    assert (ref.step, ref.kind, ref.meta) == (18, "stopped", {"k": [1]})
    assert_same(state, load_state(Checkpoints(tmp_path).latest()))


def test_raw_payloads_and_callables(tmp_path):
    ckpts = Checkpoints(tmp_path)
    ref = ckpts.write(3, {"a.bin": b"\x00" * 5, "b.txt": lambda f: f.write(memoryview(b"hello"))}, kind="stopped")
    assert (ref.read("a.bin"), ref.read("b.txt"), ref.nbytes) == (b"\x00" * 5, b"hello", 10)
    with ref.open("b.txt") as f:
        assert f.read() == b"hello"
    with pytest.raises(KeyError, match="has no file 'c'"):
        ref.read("c")
    for bad in ({"../x": b""}, {durable.MANIFEST: b""}):
        with pytest.raises(ValueError, match="plain file name"):
            ckpts.write(4, bad)
    with pytest.raises(TypeError, match="JSON"):
        ckpts.write(4, {}, meta={"t": torch.zeros(1)})
    with pytest.raises(ValueError, match="step"):
        ckpts.write(-1, {})
    assert steps_on_disk(tmp_path) == [3] and not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


# ---- torn and damaged checkpoints ----------------------------------------------
def _truncate(p):
    f = p / "state.pt"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _flip(p):
    f = p / "state.pt"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))


DAMAGE = {
    "truncated": (_truncate, "bytes, the manifest says"),
    "byte flipped": (_flip, "sha256"),
    "file missing": (lambda p: (p / "state.pt").unlink(), "is missing"),
    "manifest missing": (lambda p: (p / durable.MANIFEST).unlink(), "has no MANIFEST.json"),
    "manifest torn": (lambda p: (p / durable.MANIFEST).write_bytes((p / durable.MANIFEST).read_bytes()[:40]),
                      "does not parse"),
    "manifest of another step": (lambda p: (p / durable.MANIFEST).write_text(
        (p / durable.MANIFEST).read_text().replace('"step": 2', '"step": 5')), "holds step 5"),
    "manifest not ours": (lambda p: (p / durable.MANIFEST).write_text('{"format": "x", "version": 1}'),
                          "does not parse"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_checkpoint_is_skipped_with_one_warning(tmp_path, caplog, damage):
    ckpts = Checkpoints(tmp_path, keep=3)
    good = {"w": torch.randn(1 << 16), "step": 1}
    save_state(ckpts, 1, good)
    bad = save_state(ckpts, 2, {"w": torch.zeros(1 << 16), "step": 2})
    hurt, why = DAMAGE[damage]
    hurt(bad.path)
    caplog.set_level(logging.WARNING, logger=LOG)
    for check in ((True, False) if damage != "byte flipped" else (True,)):
        caplog.clear()
        ref = Checkpoints(tmp_path).latest(verify=check)
        assert ref is not None and ref.step == 1, f"{damage}: loaded step {ref and ref.step}"
        assert_same(good, load_state(ref))
        (msg,) = warnings_of(caplog)
        assert bad.path.name in msg and why in msg, msg
    caplog.clear()
    ref, state = load_latest_state(Checkpoints(tmp_path))  # one read per candidate, still verified
    assert ref.step == 1 and len(warnings_of(caplog)) == 1
    assert_same(good, state)


def test_load_state_checks_the_bytes_it_unpickles(tmp_path):
    # A flipped byte in tensor data: torch.load alone would load it silently.
    ref = save_state(Checkpoints(tmp_path), 1, {"w": torch.zeros(1 << 18)})
    _flip(ref.path)
    assert Checkpoints(tmp_path).latest(verify=False).path == ref.path  # sizes still match
    with pytest.raises(CorruptCheckpoint, match="sha256"):
        load_state(ref)


def test_tmp_folders_are_never_loaded_and_stale_ones_are_removed(tmp_path, caplog):
    ckpts = Checkpoints(tmp_path)
    save_state(ckpts, 1, {"step": 1})
    # A complete checkpoint, manifest included, that was never renamed into place.
    done = save_state(Checkpoints(tmp_path / "elsewhere"), 9, {"step": 9}).path
    fresh, stale, slow = tmp_path / ".tmp-fresh", tmp_path / ".tmp-stale", tmp_path / ".tmp-slow"
    done.rename(fresh)
    for p in (stale, slow):
        p.mkdir()
        (p / "state.pt").write_bytes(b"partial")
    caplog.set_level(logging.WARNING, logger=LOG)
    assert ckpts.latest().step == 1 and not warnings_of(caplog)

    old = time.time() - 2 * durable.checkpoints.STALE_TMP_S
    for p in (stale / "state.pt", stale, slow):
        os.utime(p, (old, old))
    save_state(ckpts, 2, {"step": 2})
    assert fresh.exists(), "a writer that may be alive keeps its folder"
    assert slow.exists(), "so does one that has been writing one file for hours"
    assert not stale.exists(), "a writer silent for over an hour is dead"


def test_foreign_checkpoints_are_neither_loaded_nor_pruned(tmp_path, caplog):
    a, b = Checkpoints(tmp_path, keep=1, job_id="a"), Checkpoints(tmp_path, keep=1, job_id="b")
    save_state(a, 3, {"job": "a"})
    for step in (5, 6, 7):
        save_state(b, step, {"job": "b"})
    caplog.set_level(logging.WARNING, logger=LOG)
    ref = a.latest()
    assert ref.step == 3 and load_state(ref) == {"job": "a"}
    assert len(warnings_of(caplog)) == 1 and "belongs to job 'b'" in warnings_of(caplog)[0]
    assert steps_on_disk(tmp_path) == [3, 7]


# ---- a writer killed mid-write ---------------------------------------------------
_CHILD = r"""
import sys, time, torch
from mccl.elastic.durable import Checkpoints, save_state
root, mode = sys.argv[1], sys.argv[2]
ckpts = Checkpoints(root, keep=1)
if mode == "slow":
    def slow(f):
        chunk = bytes(range(256)) * 4096
        for i in range(4096):
            f.write(chunk)
            if i == 8:
                f.flush(); print("MID", flush=True)
            if i >= 8:
                time.sleep(0.01)
    ckpts.write(2, {"big.bin": slow, "small.bin": b"x"})
else:
    for step in range(2, 10**6):
        save_state(ckpts, step, {"w": torch.full((1 << 20,), float(step)), "step": step})
        print("WROTE", step, flush=True)
print("DONE", flush=True)
"""


def _kill_writer(root: Path, mode: str, delay: float, deadline: float = 90.0) -> None:
    """Runs a writer, waits for its first progress line, SIGKILLs it `delay` s later."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(durable.__file__).parents[3]), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(root), mode], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    said: list[str] = []
    started = threading.Event()

    def read():
        for line in proc.stdout:
            said.append(line)
            if line.split()[:1] in (["MID"], ["WROTE"]):
                started.set()
    threading.Thread(target=read, daemon=True).start()
    try:
        assert started.wait(deadline), f"the writer did not start writing: {''.join(said)[-2000:]}"
        time.sleep(delay)
        assert proc.poll() is None, "the writer finished before it was killed"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(deadline) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_writer_killed_in_a_large_write_leaves_the_previous_latest(tmp_path):
    ckpts = Checkpoints(tmp_path)
    good = {"w": torch.randn(1000), "step": 1}
    save_state(ckpts, 1, good)
    _kill_writer(tmp_path, "slow", delay=0.05)
    (tmp,) = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert (tmp / "big.bin").stat().st_size >= 9 << 20 and not (tmp / durable.MANIFEST).exists()
    assert steps_on_disk(tmp_path) == [1]
    ref = Checkpoints(tmp_path).latest()
    assert ref.step == 1
    assert_same(good, load_state(ref))


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_writer_killed_anywhere_leaves_only_whole_checkpoints(tmp_path):
    # The kill lands at a random point of a stream of writes and prunes:
    # whatever is in place verifies, and the newest holds its own step.
    save_state(Checkpoints(tmp_path), 1, {"w": torch.full((1 << 20,), 1.0), "step": 1})
    _kill_writer(tmp_path, "loop", delay=random.uniform(0.0, 0.5))
    ckpts = Checkpoints(tmp_path)
    for name, ref, problem in ckpts.scan():
        assert problem is None, problem
        ckpts.verify(ref)
    ref = ckpts.latest()
    state = load_state(ref)
    assert state["step"] == ref.step >= 1 and bool((state["w"] == ref.step).all())


# ---- pruning ------------------------------------------------------------------------
def test_prune_keeps_the_newest(tmp_path):
    ckpts = Checkpoints(tmp_path, keep=2)
    for step in range(1, 6):
        save_state(ckpts, step, {"step": step})
        assert steps_on_disk(tmp_path) == list(range(max(1, step - 1), step + 1))


def test_prune_never_removes_the_one_just_written(tmp_path):
    ckpts = Checkpoints(tmp_path, keep=1)
    save_state(ckpts, 10, {"step": 10})
    save_state(ckpts, 3, {"step": 3})  # older than the newest (a rolled-back job)
    assert steps_on_disk(tmp_path) == [3, 10]
    save_state(ckpts, 4, {"step": 4})
    assert steps_on_disk(tmp_path) == [4, 10]


def test_prune_keeps_the_newest_clean_stop(tmp_path):
    ckpts = Checkpoints(tmp_path, keep=2)
    kinds = {1: "periodic", 2: "dormant", 3: "periodic", 4: "periodic", 5: "periodic"}
    for step, kind in kinds.items():
        save_state(ckpts, step, {"step": step}, kind=kind)
    assert steps_on_disk(tmp_path) == [2, 4, 5]
    save_state(ckpts, 6, {"step": 6}, kind="stopped")  # the newer clean stop supersedes step 2
    assert steps_on_disk(tmp_path) == [5, 6]
    for step in (7, 8):
        save_state(ckpts, step, {"step": step})
    assert steps_on_disk(tmp_path) == [6, 7, 8]


def test_prune_counts_only_valid_checkpoints(tmp_path, caplog):
    ckpts = Checkpoints(tmp_path, keep=2)
    for step in (1, 2):
        save_state(ckpts, step, {"w": torch.zeros(1000), "step": step})
    _flip(folder(tmp_path, 2))
    torn = tmp_path / "step-000000005-0badf00d"
    torn.mkdir()
    caplog.set_level(logging.WARNING, logger=LOG)
    save_state(Checkpoints(tmp_path, keep=2), 3, {"step": 3})  # a new process: nothing verified yet
    assert steps_on_disk(tmp_path) == [1, 3], "the damaged and the torn are removed, the good older one kept"
    assert any("removing checkpoint" in m and "sha256" in m for m in warnings_of(caplog))


# ---- background saver ------------------------------------------------------------------
class Gated(Checkpoints):
    """Writes only once the gate opens."""

    def __init__(self, root, **kw):
        super().__init__(root, **kw)
        self.gate = threading.Event()

    def write(self, *a, **kw):
        assert self.gate.wait(30), "the test never opened the gate"
        return super().write(*a, **kw)


def test_saver_skips_periodic_saves_while_busy(tmp_path):
    ckpts = Gated(tmp_path, keep=5)
    saver = BackgroundSaver(ckpts)
    assert saver.wait() is None  # nothing in flight
    assert saver.snapshot_and_save(1, {"step": 1}) and saver.busy
    assert not saver.snapshot_and_save(2, {"step": 2})
    assert not saver.snapshot_and_save(3, {"step": 3})
    assert saver.skipped == 2
    ckpts.gate.set()
    assert saver.wait().step == 1 and not saver.busy
    assert steps_on_disk(tmp_path) == [1] and saver.saves == 1
    first = saver.last_bytes
    assert saver.snapshot_and_save(4, {"step": 4})
    assert saver.wait().step == 4 and saver.skipped == 2
    assert saver.last_bytes == saver.last_ref.nbytes > 0 and saver.bytes_written == first + saver.last_bytes
    assert saver.last_write_s > 0 and saver.last_stall_s > 0


def test_saver_never_skips_a_dormant_save(tmp_path):
    ckpts = Gated(tmp_path, keep=5)
    saver = BackgroundSaver(ckpts)
    saver.snapshot_and_save(5, {"step": 5})
    threading.Timer(0.2, ckpts.gate.set).start()
    assert saver.snapshot_and_save(6, {"step": 6}, kind="dormant")  # waits for step 5, then goes
    assert saver.wait().step == 6 and saver.skipped == 0
    assert steps_on_disk(tmp_path) == [5, 6]


class Broken(Checkpoints):
    full = True

    def write(self, *a, **kw):
        if self.full:
            raise OSError(28, "No space left on device")
        return super().write(*a, **kw)


def test_saver_keeps_and_logs_errors_without_raising(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger=LOG)
    hooked: list = []
    old_hook, threading.excepthook = threading.excepthook, hooked.append
    try:
        ckpts = Broken(tmp_path)
        saver = BackgroundSaver(ckpts)
        assert saver.snapshot_and_save(7, {"step": 7})  # no raise on the caller's thread
        while saver.busy:
            time.sleep(0.01)
        assert isinstance(saver.last_error, OSError) and saver.failures == 1
        errors = [r.getMessage() for r in caplog.records if r.name == LOG and r.levelno == logging.ERROR]
        assert len(errors) == 1 and "step 7" in errors[0] and "No space left" in errors[0], errors
        with pytest.raises(OSError, match="No space left"):
            saver.wait()
        assert saver.wait() is None  # raised once
        assert saver.last_error is not None and not hooked
        with pytest.raises(TypeError, match="JSON"):  # usage errors do raise, on the caller's thread
            saver.snapshot_and_save(8, {}, meta={"x": object()})
        saver.snapshot_and_save(9, {"step": 9})  # fails, logged, then superseded by a good save
        while saver.busy:
            time.sleep(0.01)
        ckpts.full = False
        saver.snapshot_and_save(10, {"step": 10}, kind="stopped")
        assert saver.wait().step == 10 and saver.last_error is None and saver.failures == 2
    finally:
        threading.excepthook = old_hook


def test_saver_snapshot_is_isolated_from_later_changes(tmp_path):
    ckpts = Gated(tmp_path, keep=5)
    saver = BackgroundSaver(ckpts)
    live = {"w": torch.arange(1000.0), "tied": None, "extra": {"hist": [1, 2], "t": torch.zeros(3)}}
    live["tied"] = live["w"]
    expect = {"w": torch.arange(1000.0), "extra": {"hist": [1, 2], "t": torch.zeros(3)}}
    saver.snapshot_and_save(1, live)
    live["w"].add_(5)
    live["extra"]["t"].fill_(9)
    live["extra"]["hist"].append(3)
    ckpts.gate.set()
    got = load_state(saver.wait())
    assert_same(expect["w"], got["w"])
    assert_same(expect["extra"], got["extra"])
    assert got["tied"] is got["w"], "a tensor held twice is saved once"
    assert saver.snapshot_bytes == (1000 + 3) * 4

    # The second save reuses the buffers (same shapes) and leaves the first checkpoint intact.
    ptrs = [b.data_ptr() for b in saver._buffers]
    saver.snapshot_and_save(2, live)
    assert saver.wait().step == 2 and [b.data_ptr() for b in saver._buffers] == ptrs
    assert_same(live["w"], load_state(saver.last_ref)["w"])
    assert_same(expect["w"], load_state(ref_of(ckpts, 1))["w"])
    live["w"] = torch.zeros(10)  # a new shape: a new buffer
    saver.snapshot_and_save(3, live)
    assert saver.wait().step == 3 and saver._buffers[0].data_ptr() != ptrs[0]


def test_deferred_tensors_are_copied_on_the_saver_thread_before_the_fence_returns(tmp_path):
    # A State job's parameters and optimizer state change only in the
    # optimizer's step: the saver copies them on its thread while the next
    # forward and backward run; the job calls fence() before the step.
    ckpts = Gated(tmp_path, keep=5)
    saver = BackgroundSaver(ckpts)
    w, buf = torch.arange(1000.0), torch.full((4,), 7.0)
    live = {"w": w, "buf": buf, "meta": {"lr": 0.1}}
    started = threading.Event()
    real_copy = torch.Tensor.copy_

    assert saver.snapshot_and_save(1, live, deferred=lambda t: t.data_ptr() == w.data_ptr())
    buf.fill_(-1)              # not deferred: copied before snapshot_and_save returned
    live["meta"]["lr"] = 0.5   # objects are deep copies
    assert saver.fence() >= 0.0
    w.add_(100)                # after the fence: the checkpoint keeps the step's values
    ckpts.gate.set()
    got = load_state(saver.wait())
    assert_same(torch.arange(1000.0), got["w"])
    assert_same(torch.full((4,), 7.0), got["buf"]) and got["meta"] == {"lr": 0.1}
    assert saver.fence() == 0.0  # nothing in flight

    # The fence waits for the copy: a copy held back on the saver's thread.
    gate = threading.Event()

    def slow_copy(self, src, *a, **k):
        if threading.current_thread().name.startswith("mccl-checkpoint"):
            started.set()
            gate.wait(10)
        return real_copy(self, src, *a, **k)

    import unittest.mock
    with unittest.mock.patch.object(torch.Tensor, "copy_", slow_copy):
        saver.snapshot_and_save(2, live, kind="periodic", deferred=lambda t: t.data_ptr() == w.data_ptr())
        assert started.wait(10)
        threading.Timer(0.3, gate.set).start()
        assert saver.fence() >= 0.25
    saver.wait()
    assert_same(w, load_state(saver.last_ref)["w"])


def test_snapshot_stall_100mb(tmp_path):
    big = [torch.randn(5 << 20) for _ in range(4)]  # 4 x 20 MiB
    small = [torch.randn(50 << 10) for _ in range(100)]  # 100 x 200 KiB
    state = {"model": {f"big{i}": t for i, t in enumerate(big)} | {f"small{i}": t for i, t in enumerate(small)},
             "step": 0}
    nbytes = sum(t.numel() * 4 for t in big + small)
    saver = BackgroundSaver(Checkpoints(tmp_path, keep=2))
    stalls, writes = [], []
    for step in range(1, 6):
        state["step"] = step
        big[0][0] = step
        assert saver.snapshot_and_save(step, state)
        saver.wait()
        stalls.append(saver.last_stall_s)
        writes.append(saver.last_write_s)
    t0 = time.perf_counter()
    for t in big + small:
        t.clone()
    clone_s = time.perf_counter() - t0
    print(f"\nBackgroundSaver, {nbytes / 1e6:.0f} MB state ({len(big) + len(small)} tensors): "
          f"stall first {stalls[0] * 1e3:.1f} ms (allocates), then median {statistics.median(stalls[1:]) * 1e3:.1f} ms "
          f"{[round(s * 1e3, 1) for s in stalls[1:]]}; background write median {statistics.median(writes):.2f} s "
          f"{[round(w, 2) for w in writes]}; for scale, cloning the state took {clone_s * 1e3:.1f} ms")
    assert saver.saves == 5 and saver.skipped == 0 and saver.snapshot_bytes == nbytes
    assert_same(state, load_state(Checkpoints(tmp_path).latest()))
