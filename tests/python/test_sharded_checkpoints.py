"""A ShardedState's checkpoints (FSDP2, torch.distributed.checkpoint), in a
group of one: every one written with a manifest of its files' sizes and
sha256; a torn, truncated or damaged one is never loaded, the one before it
is; older ones are pruned; a job's folder of an MCCL before manifests is
still read through its pointer."""

from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.distributed as dist

import mccl.elastic as elastic
from mccl.elastic import sharded_files
from mccl.elastic.keeping import ShardedKeeping

pytestmark = pytest.mark.skipif(not hasattr(torch.distributed, "checkpoint"), reason="no torch.distributed.checkpoint")


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    sharded_files._valid.clear()
    sharded_files._warned.clear()
    try:
        yield
    finally:
        dist.destroy_process_group()


def _state(folder, keep=3):
    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    state = elastic.ShardedState(build, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                                 elastic.ElasticSampler(100, batch=4), checkpoint_dir=str(folder), keep=keep)
    state._build()
    return state


def _params(state) -> list[torch.Tensor]:
    return [p.full_tensor().detach().clone() for p in state.model.parameters()]


def _train(state, step):
    loss = state.model(torch.randn(4, 6)).square().sum()
    loss.backward()
    state.optimizer.step()
    state.optimizer.zero_grad()
    state.step = step


def _saved(folder, n):
    state = _state(folder)
    names, params = [], []
    for step in range(1, n + 1):
        _train(state, step)
        names.append(state.save(meta={"generation": step}))
        params.append(_params(state))
    return state, names, params


def _shard(folder, name):
    (f,) = [p for p in (folder / name).iterdir() if p.name.startswith("__0_")]
    return f


def test_every_checkpoint_has_a_manifest_and_the_pointer_names_the_newest(group, tmp_path):
    state, names, _ = _saved(tmp_path, 2)
    for name in names:
        assert (tmp_path / name / sharded_files.MANIFEST).exists()
        assert sharded_files.check(str(tmp_path / name)) is None
    assert (tmp_path / "latest").read_text().strip() == names[-1]
    ref = ShardedKeeping(str(tmp_path), state).latest()
    assert ref.name == names[-1] and ref.step == 2 and ref.generation == 2


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "no manifest", "shard gone"])
def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(group, tmp_path, damage, caplog):
    state, names, params = _saved(tmp_path, 2)
    newest = tmp_path / names[-1]
    shard = _shard(tmp_path, names[-1])
    if damage == "flipped byte":
        raw = bytearray(shard.read_bytes())
        raw[len(raw) // 2] ^= 0x40
        shard.write_bytes(bytes(raw))
    elif damage == "truncated":
        os.truncate(shard, shard.stat().st_size // 2)
    elif damage == "no manifest":
        (newest / sharded_files.MANIFEST).unlink()
    else:
        shard.unlink()
    sharded_files._valid.clear()  # another process: nothing verified yet
    fresh = _state(tmp_path)
    with caplog.at_level(logging.WARNING, logger="mccl.elastic"):
        ref = ShardedKeeping(str(tmp_path), fresh).latest()
        assert ref.name == names[0] and ref.step == 1
        fresh.step = 2
        assert fresh.restore() == 1
    assert fresh.step == 1 and fresh.checkpoint_name == names[0]
    for got, want in zip(_params(fresh), params[0]):
        assert torch.equal(got, want)
    assert any(names[-1] in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records), caplog.text
    assert ShardedKeeping(str(tmp_path), fresh).find(names[-1]) is None


def test_restore_without_a_valid_checkpoint_says_so(group, tmp_path):
    state, names, _ = _saved(tmp_path, 1)
    (tmp_path / names[0] / sharded_files.MANIFEST).unlink()
    sharded_files._valid.clear()
    assert ShardedKeeping(str(tmp_path), state).latest() is None
    with pytest.raises(RuntimeError, match="no valid checkpoint in"):
        _state(tmp_path).restore()


def test_older_checkpoints_are_pruned_to_keep(group, tmp_path):
    state = _state(tmp_path, keep=2)
    names = []
    for step in range(1, 5):
        _train(state, step)
        names.append(state.save())
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("step-"))
    assert left == sorted(names[-2:])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".trash-")]


def test_a_checkpoint_of_an_mccl_before_manifests_is_read_through_its_pointer(group, tmp_path):
    state, names, params = _saved(tmp_path, 1)
    old = tmp_path / "step-000000001"
    (tmp_path / names[0]).rename(old)
    (old / sharded_files.MANIFEST).unlink()
    (tmp_path / "latest").write_text("step-000000001\n")
    sharded_files._valid.clear()
    fresh = _state(tmp_path)
    assert ShardedKeeping(str(tmp_path), fresh).latest().name == "step-000000001"
    fresh.step = 1
    fresh.restore()
    for got, want in zip(_params(fresh), params[0]):
        assert torch.equal(got, want)
