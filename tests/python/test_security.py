"""Job secrets (MCCL_SECRET_FILE, `mccl secret`) and wire settings agreed at
bootstrap, through the public API. The kernel-attested same-host reads and
the handshake are tested in C++ (tests/cpp/test_local_read.cc,
test_handshake.cc, test_security.cc)."""

import os
import stat
import subprocess
import sys

import pytest

from conftest import run_workers


def _secret(path):
    out = subprocess.run([sys.executable, "-m", "mccl.cli", "secret", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


@pytest.mark.slow
def test_mccl_secret_writes_a_private_file_and_never_overwrites(tmp_path):
    path = tmp_path / "job.secret"
    out = _secret(path)
    assert "MCCL_SECRET_FILE=" in out.stdout
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600
    body = path.read_text()
    assert len(body) == 65 and int(body, 16) >= 0  # 32 random bytes as hex
    again = subprocess.run([sys.executable, "-m", "mccl.cli", "secret", str(path)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "exists" in again.stderr, again.stderr
    assert path.read_text() == body
    forced = subprocess.run([sys.executable, "-m", "mccl.cli", "secret", str(path), "--force"],
                            capture_output=True, text=True, timeout=60)
    assert forced.returncode == 0, forced.stderr
    assert path.read_text() != body
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_keyed_job_runs_collectives_and_subgroups(tmp_path, world):
    path = tmp_path / "job.secret"
    _secret(path)
    run_workers("secret.py", world, "same", str(path))


@pytest.mark.slow
def test_ranks_with_different_secrets_fail_fast_naming_the_setting(tmp_path):
    a, b = tmp_path / "a.secret", tmp_path / "b.secret"
    _secret(a)
    _secret(b)
    run_workers("secret.py", 3, "mismatch", str(a), str(b))


@pytest.mark.slow
def test_a_rank_with_other_wire_settings_is_refused_at_init(tmp_path):
    path = tmp_path / "job.secret"
    _secret(path)
    run_workers("secret.py", 3, "chunk", str(path))


@pytest.mark.slow
def test_a_secret_file_others_can_read_is_refused(tmp_path):
    path = tmp_path / "job.secret"
    _secret(path)
    os.chmod(path, 0o644)
    from mccl.launch import free_port
    probe = ("import datetime, sys, torch.distributed as dist, mccl\n"
             "try:\n"
             "    dist.init_process_group('mccl', init_method='tcp://127.0.0.1:' + sys.argv[1], rank=0,"
             " world_size=1, timeout=datetime.timedelta(seconds=20))\n"
             "except Exception as e:\n"
             "    print('REFUSED:', e)\n"
             "else:\n"
             "    print('ACCEPTED')\n")
    out = subprocess.run([sys.executable, "-c", probe, str(free_port())],
                         env=dict(os.environ, MCCL_SECRET_FILE=str(path)),
                         capture_output=True, text=True, timeout=120)
    assert "REFUSED:" in out.stdout, out.stdout + out.stderr
    assert "MCCL_SECRET_FILE=" in out.stdout and "chmod 600" in out.stdout, out.stdout
