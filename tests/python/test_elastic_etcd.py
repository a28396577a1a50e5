"""An elastic job whose store is a real 3-node etcd cluster (Raft): its
leader is killed mid-job and a joiner comes during the election; no step is
lost, the joiner gets in, `mccl elastic status` reads the job from the
cluster, and a leave and a crash follow (two shrinks of the group)."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time

import pytest

from elastic_fleet import Fleet, ends_as_replayed
from etcd_cluster import etcd_cluster  # noqa: F401  (the fixture)
from mccl.elastic.membership import EPOCH_KEY, Membership
from mccl.elastic.store import connect

pytestmark = pytest.mark.slow


def test_a_job_on_etcd_loses_no_step_when_the_leader_dies_and_admits_a_joiner_meanwhile(etcd_cluster, tmp_path):
    url = etcd_cluster.url("/mccl-test-job/")
    m = Membership(connect(url, datetime.timedelta(seconds=30)), "test")
    m.store.set(EPOCH_KEY, repr(time.time() - 3600))  # a cluster that has been up: no re-seed window to wait
    fleet = Fleet(url, tmp_path)
    try:
        for _ in range(3):
            fleet.start(initial=3)
        fleet.wait_for("3 members training", lambda: fleet.latest_world() == 3 and max(fleet.commits()) >= 10, 120)
        leader = etcd_cluster.wait_leader()
        etcd_cluster.kill(leader)
        killed = time.time()
        joiner = fleet.start()
        fleet.wait_for("the joiner in", lambda: "COMMIT" in fleet.text(joiner) and fleet.latest_world() == 4, 120)
        first = min(t for s, ws in fleet.commits().items() if 4 in ws for t in fleet.commit_times(s))
        new_leader = etcd_cluster.wait_leader()
        print(f"etcd leader {leader} killed; new leader {new_leader}; the joiner's first step "
              f"{first - killed:.2f} s after the kill")
        out = subprocess.run([sys.executable, "-m", "mccl.cli", "elastic", "status", "--store", url, "--job", "test"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "running" in out.stdout and "4 members" in out.stdout, out.stdout + out.stderr
        # Then a leave and a crash: two shrinks in a row of a group whose
        # store connection lived through the election.
        fleet.procs[1].send_signal(signal.SIGTERM)
        fleet.wait_for("the leave", lambda: fleet.latest_world() == 3 and fleet.procs[1].poll() is not None, 120)
        os.killpg(fleet.procs[2].pid, signal.SIGKILL)
        fleet.wait_for("the crash recovery", lambda: fleet.latest_world() == 2, 120)
        stop = max(fleet.commits()) + 10
        m.request_end(stop)
        ends_as_replayed(fleet, tmp_path, [0, joiner], stop)
        fleet.assert_ok([1])
    finally:
        fleet.kill_all()
