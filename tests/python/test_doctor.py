"""mccl doctor: the diagnosis on synthetic matrices, and a real run on local
ranks (the lab test makes a host slow on purpose)."""

import json
import subprocess
import sys

from mccl.doctor import diagnose, render, socket_limits


def matrix(world, slow=None, fast=1.0, slow_rate=0.1, weak_link=None):
    m = [[0.0 if i == j else fast for j in range(world)] for i in range(world)]
    for i in range(world):
        for j in range(world):
            if i != j and slow in (i, j):
                m[i][j] = slow_rate
    if weak_link:
        i, j = weak_link
        m[i][j] = slow_rate
    return m


def test_slow_host_is_named_at_every_world_size():
    for world in (3, 4, 5, 8):
        for slow in range(world):
            d = diagnose(matrix(world, slow=slow))
            assert d["slow_hosts"] == [slow], (world, slow, d)
            assert slow in (d["slowest_link"]["src"], d["slowest_link"]["dst"])


def test_one_weak_link_is_not_a_slow_host():
    d = diagnose(matrix(4, weak_link=(1, 3)))
    assert d["slow_hosts"] == []
    assert (d["slowest_link"]["src"], d["slowest_link"]["dst"]) == (1, 3)
    assert abs(d["slowest_link"]["ratio"] - 0.1) < 1e-9


def test_uniform_and_two_host_fleets_have_no_slow_host():
    assert diagnose(matrix(4))["slow_hosts"] == []
    assert diagnose(matrix(2, slow=1))["slow_hosts"] == []  # nothing to compare with


def test_socket_limits_name_the_sysctls():
    lim = socket_limits()
    assert lim["os"] == "Linux"
    assert isinstance(lim["net.core.rmem_max"], int)
    for cmd in lim["advice"]:
        assert cmd.startswith("sudo sysctl -w net.")


def test_doctor_on_local_ranks():
    p = subprocess.run([sys.executable, "-m", "mccl.cli", "doctor", "--nproc", "3", "--bytes", str(1 << 20),
                        "--rounds", "2", "--json", "--timeout", "120"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(p.stdout[p.stdout.index("{"):])
    assert len(report["ranks"]) == 3 and len(report["matrix_GBps"]) == 3
    assert all(report["matrix_GBps"][i][j] > 0 for i in range(3) for j in range(3) if i != j)
    assert report["ranks"][0]["interface"] == "lo"
    # The text form of the same report.
    report["diagnosis"]["host_median_GBps"] = {int(k): v for k, v in report["diagnosis"]["host_median_GBps"].items()}
    report["diagnosis"]["others_median_GBps"] = {int(k): v for k, v in report["diagnosis"]["others_median_GBps"].items()}
    text = render(report)
    assert "TCP goodput over MCCL" in text and "slowest link: rank" in text
