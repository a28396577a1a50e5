"""mccl doctor: the diagnosis on synthetic matrices, and a real run on local
ranks (the lab test makes a host slow on purpose)."""

import json
import subprocess
import sys

import pytest

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


@pytest.mark.slow
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
    # Each rank's MCCL threads as scheduled (the default setting: latency),
    # read back from /proc: on Linux 6.12+ a 0.1 ms slice, the rank's own
    # thread left with the kernel's.
    import platform
    has_slices = tuple(int(x) for x in platform.release().split(".")[:2]) >= (6, 12)
    for info in report["ranks"]:
        t = info["threads"]
        assert t["setting"] == "latency", t
        assert sum(t["threads"].values()) >= 1 + 2 * 2, t  # an engine; a receive and a send thread per peer
        main_nice, main_slice = t["main"]
        want = f"nice {main_nice}, slice {(100_000 if has_slices else main_slice) / 1e6:.2f} ms"
        assert list(t["threads"]) == [want], t
        assert t["slices_ns"] == [100_000 if has_slices else main_slice], t
        assert f"r{info['rank']:<3} latency: {sum(t['threads'].values())}x {want}" in text, text


def test_doctor_says_when_the_kernel_has_no_short_slices():
    info = {"rank": 0, "hostname": "h", "interface": "eth0", "address": "198.18.0.1:1",
            "limits": {"os": "Linux", "net.core.rmem_max": 1 << 25, "net.core.wmem_max": 1 << 25,
                       "net.ipv4.tcp_rmem": [1, 2, 1 << 25], "net.ipv4.tcp_wmem": [1, 2, 1 << 25], "advice": []},
            "threads": {"setting": "latency", "kernel": "6.1.0", "main": [0, 3_000_000],
                        "threads": {"nice 0, slice 3.00 ms": 5}, "slices_ns": [3_000_000]}}
    report = {"ranks": [info], "matrix_GBps": [[0.0]], "bytes": 1, "rounds": 1, "diagnosis": {}}
    text = render(report)
    assert "r0   latency: 5x nice 0, slice 3.00 ms  [nice 0, slice 3.00 ms]" in text, text
    assert "kernel 6.1.0 gives every thread the same slice: a short one for MCCL's threads needs Linux 6.12" in text
    info["threads"]["threads"] = {"nice 0, slice 0.10 ms": 5}
    info["threads"]["slices_ns"] = [100_000]
    assert "gives every thread the same slice" not in render(report)
    # Compared as numbers: two slices that print alike are still told apart.
    info["threads"]["threads"] = {"nice 0, slice 3.00 ms": 5}
    info["threads"]["slices_ns"] = [3_000_400]
    assert "gives every thread the same slice" not in render(report)
    info["threads"] = {"setting": "latency", "kernel": "24.1.0"}  # macOS: not read
    assert "r0   latency: not read on this system" in render(report)
