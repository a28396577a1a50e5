"""The etcd cluster fixture for tests (the cluster itself: mccl.bench.etcd_cluster).

    from etcd_cluster import etcd_cluster  # noqa: F401  (the fixture)

    def test_x(etcd_cluster):
        store = EtcdStore(etcd_cluster.endpoints, prefix="/t/x/")
        etcd_cluster.kill(etcd_cluster.wait_leader())
"""

from __future__ import annotations

import pytest

from mccl.bench.etcd_cluster import ETCD, EtcdCluster

__all__ = ["ETCD", "EtcdCluster", "etcd_cluster"]


@pytest.fixture(scope="module")
def etcd_cluster(tmp_path_factory):
    if ETCD is None:
        pytest.skip("no `etcd` binary on PATH (Debian: apt-get install etcd-server; scripts/setup.sh does)")
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    try:
        cluster.start()
        cluster.wait_leader()
        yield cluster
    finally:
        cluster.stop()
