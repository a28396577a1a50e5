"""init methods, torchrun, and error behaviour."""

import os
import subprocess
import sys

import pytest
import torch

from conftest import WORKERS, run_workers


@pytest.mark.parametrize("method", ["env", *(pytest.param(m, marks=pytest.mark.slow)
                                              for m in ("tcp", "file"))])
def test_init_methods(method, tmp_path):
    args = [method] + ([str(tmp_path / "rendezvous")] if method == "file" else [])
    run_workers("init_methods.py", 3, *args)


@pytest.mark.slow
def test_torchrun_standalone():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(WORKERS / "init_methods.py"), "env"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                           env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in 180 s:\n{e.stdout}\n{e.stderr}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("WORKER OK") == 2, p.stdout


@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_errors_are_clear_and_do_not_hang(world):
    run_workers("errors.py", world)


@pytest.mark.skipif(tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 9),
                    reason="ProcessGroup.set_timeout reaches a third-party backend from torch 2.9")
@pytest.mark.slow
def test_a_timeout_set_after_creation_holds_for_point_to_point():
    run_workers("p2p_timeout.py", 2)


@pytest.mark.skipif(sys.platform != "linux", reason="reads thread priorities from /proc")
@pytest.mark.parametrize("mode", [None, "normal", "latency", "high"])
@pytest.mark.slow
def test_thread_priority_sets_mccl_threads_only(mode):
    # None: the default (the worker reads the variable as the library does)
    outs = run_workers("thread_priority.py", 3, env={"MCCL_THREAD_PRIORITY": mode} if mode else {})
    for out in outs:
        if "PRIORITY complete=False" in out and mode:  # what could not be set is said once per process
            assert out.count("MCCL_THREAD_PRIORITY: ") == 1, out[-2000:]
        else:  # (the default where the kernel cannot: a line at INFO, not shown)
            assert "MCCL_THREAD_PRIORITY" not in out, out[-2000:]


SETTING_PROBE = """
import os, sys, datetime
import torch.distributed as dist
import mccl
try:
    dist.init_process_group("mccl", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=20))
except ValueError as e:
    print("REFUSED:", e)
else:
    print("ACCEPTED")
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("var,value,words", [
    ("MCCL_CHUNK_BYTES", "1K", ["MCCL_CHUNK_BYTES=1K", "out of range", "[4K, 1G]"]),
    ("MCCL_NSOCKS_PER_PEER", "0", ["MCCL_NSOCKS_PER_PEER=0", "[1, 64]"]),
    ("MCCL_SOCKET_BUFFER", "4G", ["MCCL_SOCKET_BUFFER=4G", "[0, 1G]"]),
    ("MCCL_KEEPALIVE_S", "-5", ["MCCL_KEEPALIVE_S=-5", "[0, 3600]"]),
    ("MCCL_UNEXPECTED_BYTES", "-1", ["MCCL_UNEXPECTED_BYTES=-1", "[4K, 1T]"]),
    ("MCCL_INFLIGHT_OPS", "many", ["MCCL_INFLIGHT_OPS=many", "not a number"]),
    # Counts and times are plain decimal integers: no size suffix, no hex
    # or octal, no sign or space before; sizes take K/M/G but must fit.
    ("MCCL_KEEPALIVE_S", "1K", ["MCCL_KEEPALIVE_S=1K", "not a whole number", "without a suffix"]),
    ("MCCL_HANDSHAKE_TIMEOUT_MS", "0x10", ["MCCL_HANDSHAKE_TIMEOUT_MS=0x10 is not a decimal number"]),
    ("MCCL_CALLBACK_DEADLINE_MS", "+5", ["MCCL_CALLBACK_DEADLINE_MS=+5", "not a number"]),
    ("MCCL_CHUNK_BYTES", " 4M", ["MCCL_CHUNK_BYTES= 4M", "not a number"]),
    ("MCCL_CHUNK_BYTES", "010", ["MCCL_CHUNK_BYTES=10 is out of range"]),  # decimal ten, not octal eight
    ("MCCL_PIECE_BYTES", "99999999999G", ["MCCL_PIECE_BYTES=99999999999G", "does not fit in 64 bits"]),
    ("MCCL_SMALL_BYTES", "99999999999999999999", ["MCCL_SMALL_BYTES=99999999999999999999",
                                                  "does not fit in 64 bits"]),
    ("MCCL_ALPHA_US", " 5", ["MCCL_ALPHA_US= 5", "not a number"]),
    ("MCCL_ALPHA_US", "0x10", ["MCCL_ALPHA_US=0x10", "not a number"]),
    ("MCCL_CHUNK_BYTES", "0x10", ["MCCL_CHUNK_BYTES=0x10 is not a decimal number"]),
    ("MCCL_REDUCE_THREADS", "-9223372036854775808", ["MCCL_REDUCE_THREADS=-9223372036854775808 is out of range"]),
    ("MCCL_LOG_LEVEL", "verbose-please", ["MCCL_LOG_LEVEL=verbose-please", "ERROR, WARN, INFO, DEBUG, TRACE"]),
    ("MCCL_PORT_RANGE", "1000abc-2000", ["MCCL_PORT_RANGE=1000abc-2000", "LOW-HIGH"]),
    ("MCCL_WIRE_SECURITY", "yes", ["MCCL_WIRE_SECURITY=yes", "off, integrity, encrypt"]),
    ("MCCL_THREAD_PRIORITY", "urgent", ["MCCL_THREAD_PRIORITY=urgent", "not one of normal, latency, high"]),
    ("MCCL_TRACE_DIR", "/nonexistent/mccl-trace", ["MCCL_TRACE_DIR=/nonexistent/mccl-trace",
                                                   "No such file or directory"]),
    ("MCCL_TRACE_DIR", sys.executable, [f"MCCL_TRACE_DIR={sys.executable} is not a directory"]),
    ("MCCL_TCP_CONGESTION", "cubic;", ["MCCL_TCP_CONGESTION=cubic;", "not a congestion control name"]),
    pytest.param("MCCL_TCP_CONGESTION", "nosuchcc", ["MCCL_TCP_CONGESTION=nosuchcc", "this kernel offers"],
                 marks=pytest.mark.skipif(sys.platform != "linux", reason="elsewhere the setting is refused as such")),
])
def test_out_of_range_setting_is_refused_by_name(var, value, words):
    # Every numeric setting is checked against the range declared beside it
    # (params.def); the error names the variable, the value and the range.
    from mccl.launch import free_port
    env = dict(os.environ, **{var: value})
    out = subprocess.run([sys.executable, "-c", SETTING_PROBE, str(free_port())], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "REFUSED:" in out.stdout, out.stdout + out.stderr
    for w in words:
        assert w in out.stdout, (w, out.stdout)


def test_trace_dir_set_after_loading_is_refused(tmp_path):
    # MCCL_TRACE_DIR is read once, when the library loads: set later, it
    # would trace nothing, so the group refuses it instead of ignoring it.
    from mccl.launch import free_port
    probe = SETTING_PROBE.replace("import mccl\n", f"import mccl\nos.environ['MCCL_TRACE_DIR'] = {str(tmp_path)!r}\n")
    env = {k: v for k, v in os.environ.items() if k != "MCCL_TRACE_DIR"}
    out = subprocess.run([sys.executable, "-c", probe, str(free_port())], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "REFUSED:" in out.stdout and "was set after MCCL was loaded" in out.stdout, out.stdout + out.stderr
    assert list(tmp_path.iterdir()) == []


def test_trace_dir_writes_one_file_per_process(tmp_path):
    from mccl.launch import free_port
    env = dict(os.environ, MCCL_TRACE_DIR=str(tmp_path))
    probe = SETTING_PROBE.replace('    print("ACCEPTED")\n',
                                  '    import torch; dist.all_reduce(torch.ones(3)); print("ACCEPTED")\n')
    out = subprocess.run([sys.executable, "-c", probe, str(free_port())], env=env,
                         capture_output=True, text=True, timeout=120)
    assert "ACCEPTED" in out.stdout, out.stdout + out.stderr
    files = list(tmp_path.glob("mccl-trace-*.txt"))
    assert len(files) == 1, files
    text = files[0].read_text().splitlines()
    assert text[0].startswith("# mccl trace 1 pid=") and "dropped=0" in text[0]
    names = [line.split()[1] for line in text[2:]]
    assert names.count("op_start") == names.count("op_end") >= 1 and "call_entered" in names, names


def test_size_and_int_settings_parse_as_documented():
    # The parser the groups use, through the binding that reads a run's
    # recorded settings: a Size takes K/M/G/T suffixes, an Int does not.
    from mccl import _C
    assert _C.piece_settings({"MCCL_PIECE_BYTES": "1T"}) == (1 << 40, 2)
    assert _C.piece_settings({"MCCL_PIECE_BYTES": "4MiB", "MCCL_INFLIGHT_OPS": "3"}) == (4 << 20, 3)
    with pytest.raises(RuntimeError, match="MCCL_INFLIGHT_OPS=2K is not a whole number"):
        _C.piece_settings({"MCCL_INFLIGHT_OPS": "2K"})
    with pytest.raises(RuntimeError, match="does not fit in 64 bits"):
        _C.piece_settings({"MCCL_PIECE_BYTES": "9223372036854775808"})
