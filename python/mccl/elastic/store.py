"""The job's store, as an elastic job sees it: a meeting point that may go
away and come back (empty, after a restart), never a reason to die.

``connect(address)`` takes
    "host:port" or "tcp://host:port"     a TCPStore (``mccl elastic serve``)
    "etcd://h1:2379,h2:2379,h3:2379"      a replicated etcd cluster (etcd.py)
    a torch.distributed.Store             used as is (it cannot be reconnected)
and returns a ResilientStore. Each of its calls that fails because the store
cannot be reached (the server is gone, restarting, or unreachable) waits and
tries again on a fresh connection, for as long as the caller's `patience`
allows (None: until the store is back). A process logs one line when its
store goes away and one when it is back, whatever number of connections and
threads noticed; nothing else is printed while it waits.

A TCPStore client does not reconnect by itself (a call after the server
restarted fails with "Broken pipe" forever), and constructing one against a
dead port retries noisily for its whole timeout: so a reconnect first probes
the port with a plain socket (every 0.1 s at most while nothing listens: a
refused connect costs the server's machine nothing) and builds the client
only once something listens. ``epoch`` counts the connections made: a caller that sees it move
knows the store may have restarted (and lost its keys) in between.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from datetime import timedelta
from typing import Callable

import torch.distributed as dist

log = logging.getLogger("mccl.elastic")


class StoreAway(ConnectionError):
    """The store could not be reached within the caller's patience."""


def is_away(e: BaseException, op: str = "") -> bool:
    """Whether `e` says the store cannot be reached (as opposed to a key
    that is not there yet, or a bad argument)."""
    if isinstance(e, (StoreAway, dist.DistNetworkError, ConnectionError)):
        return True
    if isinstance(e, OSError):
        return True
    text = str(e)
    if any(s in text for s in ("Broken pipe", "Connection reset", "Connection refused", "failed to connect",
                               "Connection closed by peer", "Socket Timeout", "Transport endpoint")):
        return True
    # A call other than a wait for a key that times out: the server stopped answering.
    return isinstance(e, dist.DistStoreError) and "timeout" in text.lower() and op not in ("get", "wait")


class _Health:
    """Whether this process's store is away, shared by every connection to it
    (the job's, its watcher thread's): one line when it goes, one when it is back."""

    def __init__(self, describe: str):
        self.describe = describe
        self.lock = threading.Lock()
        self.away_since: float | None = None
        self.back_at: float | None = None  # when the last outage ended (time.monotonic)
        self.outages = 0

    def lost(self, e: BaseException) -> None:
        with self.lock:
            if self.away_since is None:
                self.away_since = time.monotonic()
                self.outages += 1
                log.warning("mccl.elastic: the store at %s is away (%s); training goes on, membership changes "
                            "wait for it", self.describe, _short(e))

    def back(self) -> None:
        with self.lock:
            if self.away_since is not None:
                self.back_at = time.monotonic()
                log.warning("mccl.elastic: the store at %s is back after %.1f s", self.describe,
                            self.back_at - self.away_since)
                self.away_since = None

    @property
    def away(self) -> bool:
        return self.away_since is not None


def _short(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return first[:160]


_DEFAULT = object()


class ResilientStore:
    """A store client that outlives its store's restarts (see the module doc).

    `connect()` builds a client; `probe()`, if given, says cheaply whether a
    server is there to connect to. Calls are serialised (one connection is
    not shared between threads: use clone() for another thread)."""

    def __init__(self, connect: Callable[[], dist.Store], describe: str, probe: Callable[[], bool] | None = None,
                 health: _Health | None = None, reconnects: bool = True, client: dist.Store | None = None,
                 host: str = "127.0.0.1"):
        self._connect, self._probe = connect, probe
        self.describe = describe
        self.host = host  # a host of the store: a member's address is the one that routes there
        self.health = health or _Health(describe)
        self.reconnects = reconnects
        self._client: dist.Store | None = client
        self._handed: dist.Store | None = None  # the client raw() gave a process group
        self._lock = threading.RLock()
        self.epoch = 0 if client is None else 1
        self._born = self.health.outages  # the process's outages when this connection was made
        # When calls last began to succeed again (after the first connection,
        # or an outage): time the store was away must not count as the job's
        # members being silent, or survivors being late.
        self.reachable_since = time.monotonic()
        self._failing = False
        self.closing = False  # set by the owner: waiting calls give up (StoreAway)
        # How long a call waits for the store to come back unless it says: None, until it does.
        self.patience: float | None = None
        # The longest pause between tries while the store is away: with a
        # probe (a TCP connect, refused at once while nothing listens; etcd:
        # whether a node has a leader) a return is seen within 0.1 s; a client
        # given as a Store object is tried at most every 0.5 s.
        self._max_pause = 0.1 if probe is not None else 0.5

    # ---- connections ---------------------------------------------------------
    def raw(self, patience=_DEFAULT) -> dist.Store:
        """The current client (connecting if there is none): for a process
        group's rendezvous, which takes a torch Store. It is never closed
        here (the group keeps it, and torch's shrink_group clones it)."""
        with self._lock:
            client = self._retry("connect", lambda c: c, patience)
            self._handed = client
            return client

    def clone(self) -> "ResilientStore":
        """An independent connection to the same store (for another thread)."""
        if self.reconnects:
            return ResilientStore(self._connect, self.describe, self._probe, self.health, host=self.host)
        base = self.raw()
        other = base.clone() if hasattr(base, "clone") else None
        if other is None:
            raise TypeError(f"mccl.elastic: the store {self.describe} cannot be cloned")
        return ResilientStore(lambda: other, self.describe, None, self.health, reconnects=False, client=other,
                              host=self.host)

    @property
    def can_clone(self) -> bool:
        if self.reconnects:
            return True
        try:
            return hasattr(self.raw(), "clone")
        except Exception:  # noqa: BLE001
            return False

    def _ensure(self) -> dist.Store:
        if self._client is not None and self.reconnects and self._born != self.health.outages \
                and not self.health.away:
            # Connected before an outage that another connection of this
            # process lived through: this one is broken (or talks to a server
            # that restarted); a new one, without a failed call first.
            self._drop()
        if self._client is None:
            if self._probe is not None and not self._probe():
                raise StoreAway(f"nothing answers at {self.describe}")
            self._client = self._connect()
            self._born = self.health.outages
            self.epoch += 1
        return self._client

    def _drop(self) -> None:
        """Forgets the current connection (closing it where the client can,
        unless a process group holds it)."""
        client, self._client = self._client, None
        close = getattr(client, "close", None)
        if callable(close) and client is not self._handed:
            try:
                close()
            except Exception:  # noqa: BLE001 - it is broken already
                pass

    def _retry(self, op: str, fn, patience):
        if patience is _DEFAULT:
            patience = self.patience
        end = None if patience is None else time.monotonic() + patience
        pause = 0.05
        while True:
            try:
                client = self._ensure()
                if end is None or isinstance(client, dist.TCPStore) or not hasattr(client, "set_timeout"):
                    out = fn(client)
                else:
                    # A client that fails over by itself (etcd) would wait for a
                    # leader up to its own timeout: no longer than the patience.
                    before = client.timeout
                    client.set_timeout(timedelta(seconds=max(0.2, end - time.monotonic())))
                    try:
                        out = fn(client)
                    finally:
                        client.set_timeout(before)
                if self._failing:
                    self._failing = False
                    self.reachable_since = time.monotonic()
                if self.health.away:
                    self.health.back()
                return out
            except Exception as e:  # noqa: BLE001 - sorted below
                if not is_away(e, op):
                    raise
                self.health.lost(e)
                self._failing = True
                if self.reconnects:
                    self._drop()
                if self.closing or (end is not None and time.monotonic() >= end):
                    raise StoreAway(f"mccl.elastic: the store at {self.describe} is away ({_short(e)})") from e
                time.sleep(pause if end is None else max(0.0, min(pause, end - time.monotonic())))
                pause = min(self._max_pause, pause * 2)

    @contextlib.contextmanager
    def patient(self, seconds: float | None):
        """Calls in the block wait at most `seconds` for the store (a leaver
        must be gone within its agent's deadline)."""
        before, self.patience = self.patience, seconds
        try:
            yield
        finally:
            self.patience = before

    def _call(self, op: str, patience, *args):
        with self._lock:
            return self._retry(op, lambda c: getattr(c, op)(*args), patience)

    # ---- the c10d Store calls the protocol uses -----------------------------------
    def set(self, key: str, value, patience=_DEFAULT) -> None:
        self._call("set", patience, key, value)

    def get(self, key: str, patience=_DEFAULT) -> bytes:
        return self._call("get", patience, key)

    def add(self, key: str, amount: int, patience=_DEFAULT) -> int:
        return self._call("add", patience, key, amount)

    def compare_set(self, key: str, expected, desired, patience=_DEFAULT) -> bytes:
        return self._call("compare_set", patience, key, expected, desired)

    def check(self, keys: list[str], patience=_DEFAULT) -> bool:
        return self._call("check", patience, keys)

    def append(self, key: str, value, patience=_DEFAULT) -> None:
        self._call("append", patience, key, value)

    def delete_key(self, key: str, patience=_DEFAULT) -> bool:
        return self._call("delete_key", patience, key)

    def num_keys(self, patience=_DEFAULT) -> int:
        return self._call("num_keys", patience)


def _tcp_probe(host: str, port: int) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            return False
    return probe


def split_host_port(address: str, what: str = "store address") -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"mccl.elastic: {what} {address!r} is not host:port")
    return host, int(port)


def connect(store: "str | dist.Store | ResilientStore", timeout: timedelta) -> ResilientStore:
    """The job's store from an address (see the module doc)."""
    if isinstance(store, ResilientStore):
        return store
    if isinstance(store, dist.Store):
        host = getattr(store, "host", None) or getattr(store, "route_host", None) or "127.0.0.1"
        return ResilientStore(lambda: store, type(store).__name__, None, reconnects=False, client=store,
                              host=host if isinstance(host, str) else "127.0.0.1")
    if not isinstance(store, str):
        raise TypeError(f"mccl.elastic: the store must be an address or a torch.distributed.Store, "
                        f"got {type(store).__name__}")
    if store.startswith(("etcd://", "etcd+http://")):
        from .etcd import connect_url, leader_probe, parse_url
        endpoints, _ = parse_url(store)
        # etcd fails over between its nodes by itself; past an election's
        # length (seconds) the cluster is away, and patience takes over. While
        # it is, a status request to each node tells when a leader is back.
        own = timedelta(seconds=min(timeout.total_seconds(), 30.0))
        return ResilientStore(lambda: connect_url(store, own), store, leader_probe(endpoints), host=endpoints[0][0])
    address = store[len("tcp://"):] if store.startswith("tcp://") else store
    if "://" in address:
        raise ValueError(f"mccl.elastic: store {store!r}: the scheme is not one of tcp://, etcd://")
    host, port = split_host_port(address)
    # The client's own timeout bounds one call to a store host that vanished
    # without a reset (patience then decides whether to try again).
    own = timedelta(seconds=min(timeout.total_seconds(), 10.0))
    return ResilientStore(lambda: dist.TCPStore(host, port, is_master=False, timeout=own,
                                                wait_for_workers=False),
                          f"{host}:{port}", _tcp_probe(host, port), host=host)
