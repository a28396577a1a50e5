"""A week of nights, compressed (mccl.bench.elastic_week): six members (on
the network lab; four on loopback with etcd) come one by one at dusk, one
leaves and one is killed and both come back, all leave at dawn; seven
times. Mid-week the store fails once: on the network lab the TCPStore is
killed and started again empty, on an etcd cluster the leader is killed. At the end the parameters equal the one-process float64
replay of the committed steps (the sampler's order: no sample twice within
an epoch), and every dusk resumed at the step of the dawn before it."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from elastic_fleet import Fleet, StoreServer, final_step, replay
from etcd_cluster import etcd_cluster  # noqa: F401  (the fixture)
from mccl.bench.elastic_week import Members, StoreFault, week
from mccl.elastic.membership import KeySetter

pytestmark = pytest.mark.slow

HOSTS, NIGHTS = 6, 7


def members_of(fleet: Fleet, setter: KeySetter) -> Members:
    def first_step(i):
        m = re.search(r"COMMIT (\d+)", fleet.text(i))
        return int(m.group(1)) if m else -1

    def max_step():
        c = fleet.commits()
        return max(c) if c else -1

    def ready_s(i):
        m = re.search(r"ready ([\d.]+) s after it asked to join", fleet.text(i))
        return float(m.group(1)) if m else None

    return Members(start=lambda h, create: fleet.start(create=create, host=h), proc=lambda i: fleet.procs[i],
                   world=fleet.latest_world, max_step=max_step, trained=lambda i: "COMMIT" in fleet.text(i),
                   first_step=first_step, record=setter.latest, wait=fleet.wait_for, end=setter.end,
                   ready_s=ready_s, expect_exit=fleet.may_fail.add,
                   start_armed=lambda h, path: fleet.start(host=h, extra=["--ask-when", path]),
                   armed=lambda i: "ARMED" in fleet.text(i))


def ends_as_a_replayed_week(fleet: Fleet, tmp_path, nights, hosts: int = HOSTS) -> None:
    last = [i for i in range(len(fleet.procs)) if fleet.procs[i].returncode == 0 and "DONE step" in fleet.text(i)]
    assert len(last) == hosts, f"{len(last)} members ended the job"
    final = final_step(fleet, last, 0)
    worlds = fleet.last_gen_worlds()
    assert sorted(worlds) == list(range(final)), "a step is missing"
    for s, ws in worlds.items():
        assert len(ws) == 1, f"members disagree on step {s}'s world: {ws}"
    worlds = {s: ws.pop() for s, ws in worlds.items()}
    got, want = torch.load(tmp_path / "final.pt"), replay(worlds, final)
    for k in want:
        assert torch.allclose(got[k], want[k], rtol=1e-10, atol=1e-12), k
    for n in nights[1:]:
        assert n.dusk_step == nights[n.night - 2].dawn_step  # no step lost at dawn
    print(f"{final} steps over {len(nights)} nights; {len(fleet.procs)} member processes")


@pytest.mark.netlab
def test_a_week_of_nights_on_the_lab_with_a_store_restart(tmp_path):
    from mccl.netlab import Lab
    missing = Lab.requirements(goodput=False)
    if missing:
        pytest.skip("network lab needs " + " and ".join(missing))
    lab = Lab.up(HOSTS, rate="1gbit", name="mcclw")
    server = StoreServer(host=lab.hosts[0].address, port=29473, prefix=lab.prefix(0)).start()
    fleet = Fleet(server.address, tmp_path, lab, extra=["--checkpoint-dir", str(tmp_path / "ckpt"),
                                                        "--timeout-s", "30"])
    setter = KeySetter(server.address, "test", prefix=lab.prefix(0))
    try:
        nights = week(members_of(fleet, setter), HOSTS, NIGHTS,
                      StoreFault("tcp", kill=server.kill, start=server.start), outage_s=10.0)
        ends_as_a_replayed_week(fleet, tmp_path, nights)
        fault = nights[NIGHTS // 2].fault
        assert fault["steps_during_outage"] > 0, fault  # the members trained through it
    finally:
        setter.close()
        fleet.kill_all()
        server.kill()
        lab.down()


def test_a_week_of_nights_on_etcd_with_a_leader_kill(etcd_cluster, tmp_path):
    # On loopback (etcd's nodes and the members on this machine), with 4
    # members: the 6-host week runs on the lab above, and CI's 2 cores carry
    # the etcd nodes too.
    url = etcd_cluster.url("/mccl-week/")
    setter = KeySetter(url, "test")
    fleet = Fleet(url, tmp_path, extra=["--checkpoint-dir", str(tmp_path / "ckpt"), "--timeout-s", "30"])

    def kill_leader() -> int:
        node = etcd_cluster.wait_leader()
        etcd_cluster.kill(node)
        return node

    try:
        nights = week(members_of(fleet, setter), 4, NIGHTS,
                      StoreFault("etcd", kill_leader=kill_leader, restart=etcd_cluster.start,
                                 wait_leader=etcd_cluster.wait_leader))
        fault = next(n.fault for n in nights if n.fault)
        print(f"etcd leader killed: {fault}")
        # the joiner was up before the kill and asked at it: its join ran during the election
        assert fault["joiner_asked_at_kill"] and fault["joiner_ready_s"] is not None, fault
        ends_as_a_replayed_week(fleet, tmp_path, nights, hosts=4)
    finally:
        setter.close()
        fleet.kill_all()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-s"]))
