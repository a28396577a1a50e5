"""The first boundary after a change: rank 0 counts the whole join requests
in the store itself, and right after a store outage waits up to
AFTER_OUTAGE_S for one that the outage held back (a joiner that asked
during an etcd election is then admitted at once, not a step later). No
processes: a real TCPStore, the Job method called on a stand-in."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from mccl.elastic import job as job_mod
from mccl.elastic.job import Job
from mccl.elastic.membership import Membership
from mccl.elastic.store import StoreAway, connect


@pytest.fixture
def members():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    m = Membership(connect(f"127.0.0.1:{server.port}", timedelta(seconds=10)), "t")
    yield m
    del server


def _job(members, watcher_count: int, admitted: int = 0):
    return SimpleNamespace(members=members, _requests=lambda: watcher_count,
                           record=SimpleNamespace(admitted=admitted))


def _register(members) -> None:
    """A joiner's registration, as Membership.register writes it."""
    k = members.store.add(members.key("joinseq"), 1)
    members.set(f"join/{k}", "{}")
    members.heartbeat(k)


def test_health_notes_when_an_outage_ends(members):
    h = members.store.health
    assert h.back_at is None
    h.lost(ConnectionError("test"))
    assert h.away and h.back_at is None
    before = time.monotonic()
    h.back()
    assert not h.away and before <= h.back_at <= time.monotonic()


def test_without_an_outage_the_count_is_the_stores_own_at_once(members):
    for _ in range(3):
        _register(members)
    t = time.monotonic()
    assert Job._requests_now(_job(members, watcher_count=1)) == 3  # not the watcher's older look
    assert time.monotonic() - t < job_mod.AFTER_OUTAGE_S


def test_a_request_caught_half_written_is_not_counted(members):
    _register(members)
    members.store.add(members.key("joinseq"), 1)  # number 2 taken, its request not written yet
    assert Job._requests_now(_job(members, watcher_count=0)) == 1
    members.set("join/2", "{}")
    members.heartbeat(2)
    assert Job._requests_now(_job(members, watcher_count=0)) == 2


def test_after_an_outage_a_joiner_that_asks_within_the_window_is_counted_when_it_asks(members):
    h = members.store.health
    h.lost(ConnectionError("test"))
    h.back()
    threading.Timer(0.2, lambda: _register(members)).start()
    assert Job._requests_now(_job(members, watcher_count=0)) == 1
    took = time.monotonic() - h.back_at
    assert 0.2 <= took < job_mod.AFTER_OUTAGE_S  # as soon as it asked, not the whole window
    # Nobody asks: the whole window, then the count.
    h.lost(ConnectionError("test"))
    h.back()
    assert Job._requests_now(_job(members, watcher_count=0, admitted=1)) == 1
    assert time.monotonic() - h.back_at >= job_mod.AFTER_OUTAGE_S
    # Long after the outage: no wait.
    h.back_at = time.monotonic() - 10
    t = time.monotonic()
    assert Job._requests_now(_job(members, watcher_count=0, admitted=1)) == 1
    assert time.monotonic() - t < job_mod.AFTER_OUTAGE_S


def test_while_the_store_is_away_the_watchers_count_is_used(members):
    h = members.store.health
    h.lost(ConnectionError("test"))
    assert Job._requests_now(_job(members, watcher_count=7)) == 7
    h.back()

    class Away:
        store = members.store

        def requests(self, patience=None):
            raise StoreAway("test")
    fake = SimpleNamespace(members=Away(), _requests=lambda: 5, record=SimpleNamespace(admitted=0))
    h.back_at = time.monotonic() - 10
    assert Job._requests_now(fake) == 5
