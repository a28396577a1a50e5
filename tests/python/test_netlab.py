"""Network-lab tier: hosts in network namespaces on one shaped switch.

Runs only as root with iproute2 (skipped with the reason otherwise): brings
up a 3-host lab at 1 Gbit/s, checks its TCP goodput, runs every collective
across the hosts with MCCL_SOCKET_IFNAME (against references and Gloo),
checks that `mccl doctor` names a host made slow on purpose, and cuts a
link in the middle of an all-reduce and while every connection is idle.
"""

import json
import subprocess
import sys
import threading
import time

import pytest

from conftest import run_workers
from mccl.netlab import Lab

missing = Lab.requirements(goodput=True)
pytestmark = [pytest.mark.netlab, pytest.mark.slow,
              pytest.mark.skipif(bool(missing), reason="network lab needs " + " and ".join(missing))]


@pytest.fixture(scope="module")
def lab():
    lab = Lab.up(3, rate="1gbit", name="mcclt")
    yield lab
    lab.down()


def test_lab_records_and_sets_the_hosts_congestion_control(lab):
    cc = "/proc/sys/net/ipv4/tcp_congestion_control"
    for h in lab.hosts:
        assert lab.run(h.index, ["cat", cc], capture_output=True, text=True).stdout.strip() == lab.congestion
    assert lab.congestion and f"TCP congestion control {lab.congestion}" in lab.describe()
    # reno is built into every kernel and always allowed.
    small = Lab.up(2, rate="1gbit", name="mcclcc", congestion="reno")
    try:
        assert small.congestion == "reno" and Lab.load("mcclcc").congestion == "reno"
        assert small.run(1, ["cat", cc], capture_output=True, text=True).stdout.strip() == "reno"
    finally:
        small.down()
    with pytest.raises(Exception, match="not a name"):
        Lab.up(2, name="mcclcc", congestion="reno; true")


def test_goodput_is_near_the_shaped_rate(lab):
    g = lab.measure_goodput(seconds=2)
    print("goodput Gbit/s:", {k: round(v * 8, 3) for k, v in g["links_GBps"].items()})
    # 1 Gbit/s of Ethernet carries ~0.94 Gbit/s of TCP payload (0.95 measured
    # here); the shaping must cap it, and a loaded machine must not halve it.
    assert 0.7 < g["min_GBps"] * 8 <= 1.0, g
    assert Lab.load("mcclt").goodput == g


def test_hosts_have_autocorking_off(lab):
    # The veths' late TX completion turns autocorking into ~40 ms stalls of
    # short tails (see mccl.netlab); the lab's hosts run without it.
    knob = "/proc/sys/net/ipv4/tcp_autocorking"
    for h in lab.hosts:
        out = subprocess.run(["ip", "netns", "exec", h.netns, "sh", "-c", f"[ ! -e {knob} ] || cat {knob}"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out in ("", "0"), f"{h.netns}: tcp_autocorking={out}"
    assert "autocorking off" in lab.describe()


def test_every_collective_across_hosts(lab):
    # Lab hosts are separate network namespaces: no frame may skip the
    # shaped links by a same-host read, whatever the threshold.
    outs = run_workers("collectives.py", 3, lab=lab, timeout=400,
                       env={"MCCL_LOCAL_READ_BYTES": "1", "EXPECT_LOCAL_READS": "0"})
    assert "checks passed" in outs[0]


def test_doctor_names_the_slow_host(lab):
    lab.set_rate(2, "100mbit")
    try:
        p = subprocess.run([sys.executable, "-m", "mccl.cli", "doctor", "--netlab", "mcclt", "--json",
                            "--bytes", str(2 << 20), "--rounds", "2", "--timeout", "120"],
                           capture_output=True, text=True, timeout=180)
    finally:
        lab.set_rate(2, "1gbit")
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(p.stdout[p.stdout.index("{"):])
    d = report["diagnosis"]
    assert d["slow_hosts"] == [2], d
    assert 2 in (d["slowest_link"]["src"], d["slowest_link"]["dst"]), d
    assert [r["interface"] for r in report["ranks"]] == ["eth0"] * 3
    assert report["ranks"][1]["address"].startswith("198.18.0.2:")


def test_cut_link_mid_allreduce_fails_every_rank_at_the_timeout(lab, tmp_path):
    def cutter():
        end = time.monotonic() + 60
        while len(list(tmp_path.glob("running.*"))) < 3 and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.3)  # in the middle of the stream of all-reduces
        lab.cut(1)

    t = threading.Thread(target=cutter)
    t.start()
    try:
        run_workers("cut_link.py", 3, str(tmp_path), lab=lab, timeout=90)
    finally:
        t.join()
        lab.restore(1)


def test_cut_link_while_idle_fails_the_waiting_ranks_at_the_keepalive(lab, tmp_path):
    def cutter():
        end = time.monotonic() + 60
        while len(list(tmp_path.glob("ready.*"))) < 3 and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.5)  # ranks 0 and 2 are waiting in the broadcast
        lab.cut(1)

    t = threading.Thread(target=cutter)
    t.start()
    try:
        run_workers("cut_idle.py", 3, str(tmp_path), lab=lab, timeout=90, env={"MCCL_KEEPALIVE_S": "4"})
    finally:
        t.join()
        lab.restore(1)
