"""The MPS path, tested on Linux (no Mac here): MCCL's boxed c10d kernels
through test namespaces holding the real schemas of torch 2.5-2.7 and
2.8-2.13 (read from their wheels) and this torch's, and the MPS device
adapter's ordering through a fake Metal port."""

import pytest
import torch

import mccl
from conftest import run_workers


def test_mps_kernels_registered_for_every_op():
    # c10d has no MPS kernels of its own; MCCL registers one per op it serves.
    names = mccl._C._mps_kernels()
    assert "allreduce_" in names and "send" in names and "barrier" in names
    for name in names:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"c10d::{name}", "MPS"), name
    assert "monitored_barrier_" not in names  # Gloo-only; not served


@pytest.mark.slow
def test_boxed_kernels_serve_the_real_schemas_of_every_supported_torch():
    # torch 2.5-2.7 and 2.8-2.13 as read from their wheels, a synthetic
    # variant, and the installed torch.
    outs = run_workers("boxed_ops.py", 3, timeout=240)
    for v in ("v25", "v28", "v27", "now"):
        assert f"{v}: " in outs[0], outs[0]


FAKE_MPS = {"shared": {"MCCL_FAKE_DEVICE_FOR_TESTING": "mps-shared:300"},
            "private": {"MCCL_FAKE_DEVICE_FOR_TESTING": "mps-private:300"}}


@pytest.mark.parametrize("mode", ["shared", "private"])
@pytest.mark.slow
def test_fake_mps_staging_orders_fence_and_copies(mode):
    # Shared: the core works in the tensors' memory after the fence;
    # private: blits on MCCL's own queue into poisoned shared buffers.
    run_workers("device_staging.py", 3, "cpu", env=FAKE_MPS[mode], timeout=300)


@pytest.mark.parametrize("mode", ["shared", "private"])
@pytest.mark.slow
def test_fake_mps_every_collective(mode):
    outs = run_workers("collectives.py", 3, env=FAKE_MPS[mode], timeout=420)
    assert "checks passed" in outs[0]


@pytest.mark.slow
def test_fake_mps_slow_copy_does_not_block_the_network():
    # Results take 3 s to reach the fake device: a barrier on the same
    # connections completes meanwhile; the Future's callback waits for the
    # issuing thread (Work.wait), never on a network thread.
    run_workers("slow_device.py", 2, env=FAKE_MPS["private"], timeout=120)


@pytest.mark.parametrize("mode", ["shared", "private"])
@pytest.mark.slow
def test_fake_mps_callbacks_run_where_mps_is_safe(mode):
    # A Future's then() callback never runs on an MCCL thread while the
    # issuing thread computes: on that thread at its next MCCL call or
    # Work.wait(), on a runner thread once every thread rests (DDP's reducer
    # with fp16_compress_hook and PowerSGD, against Gloo).
    outs = run_workers("mps_callbacks.py", 2, env=dict(FAKE_MPS[mode], MCCL_TEST_STACK_KIB="512"), timeout=180)
    assert "callback counts" in outs[0]


def test_fake_mps_callbacks_past_the_deadline():
    run_workers("mps_callbacks.py", 2, "deadline",
                env=dict(FAKE_MPS["private"], MCCL_CALLBACK_DEADLINE_MS="200", MCCL_TEST_STACK_KIB="512"),
                timeout=120)


@pytest.mark.parametrize("piece", [pytest.param("4M", marks=pytest.mark.slow), "64K"])
def test_fake_mps_pools_buffers_and_batches_copies(piece):
    # Counted by the fake Metal port as mps_metal.mm counts them; at 64K the
    # 1.2 MB all-reduce goes in 19 pieces under one fence.
    run_workers("mps_counts.py", 3, env=dict(FAKE_MPS["private"], MCCL_PIECE_BYTES=piece), timeout=120)


@pytest.mark.parametrize("mode", ["shared", "private"])
@pytest.mark.slow
def test_fake_mps_in_pieces(mode):
    # Large all-reduces in 1 KiB pieces (strided tensors through a contiguous
    # copy, copied back by the CPU in Shared storage).
    outs = run_workers("collectives.py", 3, env=dict(FAKE_MPS[mode], MCCL_PIECE_BYTES="1K"), timeout=420)
    assert "checks passed" in outs[0]


def test_fsdp2_ops_get_mps_kernels():
    from mccl import _mps
    _mps.install_fsdp_kernels("MPS")
    copy_op = "copy_" if hasattr(torch.ops.fsdp, "copy_") else "set_"  # set_ in torch 2.5
    for op in ("all_gather_copy_in", "split_with_sizes_copy", "chunk_cat", copy_op):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fsdp::{op}", "MPS"), op
    # The MPS kernel runs FSDP2's own implementation (called here on CPU
    # tensors by dispatching straight to the MPS key).
    ks = torch._C.DispatchKeySet(torch._C.DispatchKey.MPS)
    parts = [torch.arange(6.0).view(2, 3), torch.arange(4.0).view(2, 2)]
    got, want = torch.zeros(2, 5), torch.zeros(2, 5)
    torch.ops.fsdp.chunk_cat.default.redispatch(ks, parts, 0, 2, out=got)
    torch.ops.fsdp.chunk_cat.default(parts, 0, 2, out=want)
    assert torch.equal(got, want) and want.abs().sum() > 0
    dst = torch.zeros(3)
    getattr(torch.ops.fsdp, copy_op).default.redispatch(ks, dst, torch.tensor([1.0, 2.0, 3.0]))
    assert dst.tolist() == [1.0, 2.0, 3.0]


def test_stream_shim_gives_fsdp2_one_stream():
    import types
    from mccl import _mps

    recorded = []

    class Event:
        done = True

        def record(self):
            recorded.append(self)

        def query(self):
            return Event.done

    fake = types.SimpleNamespace(Event=Event, synchronize=lambda: None)
    added = _mps.install_stream_shim(fake)
    assert set(added) >= {"Stream", "current_stream", "stream", "current_device"}
    s = fake.Stream(priority=-1)
    assert s == fake.current_stream() and hash(s) == hash(fake.current_stream())
    s.wait_stream(fake.current_stream())
    e = s.record_event()
    assert recorded == [e]
    with fake.stream(s):
        pass
    assert fake.current_device() == 0
    # query() asks a fresh event, not a constant.
    assert s.query() is True
    Event.done = False
    assert s.query() is False
    # The one-stream assumption is asserted, not assumed: a wait for another
    # kind of stream or event is refused.
    s.wait_event(Event())
    with pytest.raises(TypeError, match="one in-order stream"):
        s.wait_stream(object())
    with pytest.raises(TypeError, match="torch.mps events"):
        s.wait_event(object())
    # A torch.mps with stream API of its own gets none of the shim's streams.
    fake2 = types.SimpleNamespace(Event=Event, current_stream=int, synchronize=lambda: None)
    added = _mps.install_stream_shim(fake2)
    assert not {"Stream", "current_stream", "stream", "default_stream"} & set(added), added
    assert fake2.current_stream is int and "current_device" in added


mps = pytest.mark.skipif(not torch.backends.mps.is_available(),
                         reason="needs Apple MPS (no Mac here; the fake-port tests above cover the logic)")


@mps
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.slow
def test_real_mps_staging_and_ddp(world):
    run_workers("device_staging.py", world, "mps", timeout=300)


@mps
def test_real_mps_every_collective():
    outs = run_workers("collectives.py", 3, env={"MCCL_TEST_DEVICE": "mps"}, timeout=600)
    assert "checks passed" in outs[0]


@mps
def test_real_mps_with_cpu_ranks():
    outs = run_workers("collectives.py", 4, env={"MCCL_TEST_DEVICE": "mps,mps,cpu,cpu"}, timeout=600)
    assert "checks passed" in outs[0]
