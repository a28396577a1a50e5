"""A c10d Store on an etcd cluster (Raft, v3 API): no single machine holds a
job's coordination.

    store = connect_url("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/jobs/vit")
    job = mccl.elastic.Job(store, job_id="vit")        # or
    dist.init_process_group("mccl", store=dist.PrefixStore("pg0/", store), rank=r, world_size=n)

Why etcd's JSON gateway: etcd serves its v3 gRPC API also as HTTP/JSON
(POST /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/kv/deleterange; keys and
values base64). Speaking it with http.client needs no dependency (python-etcd3
is unmaintained and pulls in grpcio), so a Mac with nothing but Python joins.
Versions: etcd 3.4 and later (3.4 serves the gateway at /v3/ and keeps /v3beta/;
3.5+ serve /v3/ only; 3.3 and older are not supported) — etcd's "gRPC gateway"
guide, etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/. Plain http only.

Semantics are c10d's TCPStore's (tests/python/test_etcd_store.py runs one
table of operations on both). Every key lives under ``prefix`` (default
/mccl/), so jobs and users share a cluster. Cost of each op, in HTTP round
trips to one etcd member (a write also waits for a Raft commit on a majority,
a read for the leader's confirmation — reads are linearizable):

    set, num_keys, multi_set (one txn, atomic)      1
    get, check, wait, multi_get (keys present)      1; missing keys are polled
                                                    every 2 ms growing to 50 ms
    add, compare_set, append, delete_key            2: range, then a txn compared on
                                                    mod_revision; +1 per lost race
    compare_set that does not match, delete_key
    of a missing key                                1

Measured on loopback (3 nodes on one 2-core Linux box, data on ext4): set
about 2 ms, get 1-2 ms, add and compare_set 4-5 ms per call.

Failover: the client knows every endpoint. A connection error, a request
that takes longer than ``request_timeout`` (1.5 s), a request that has not
answered within 0.1 s when its node no longer answers a status request
either, or etcd's "no leader",
"leader changed", "request timed out" (gRPC UNAVAILABLE, DEADLINE_EXCEEDED,
RESOURCE_EXHAUSTED) move it to the next endpoint, where the same request is
sent again, until the store's timeout passes; then DistNetworkError names
every endpoint and its last error. A leader killed mid-op costs about one
election (1-2 s with --election-timeout 1000; etcd's default is 1000 ms too):
a write that a follower forwarded to the dead leader is lost silently (the
follower would answer only at its own timeout), so a request unanswered for
0.1 s asks its node for the Raft term and is sent again to that node (once
per call) when the term is newer than the node's answers showed (an election
began).
A request whose answer was lost may have been applied, so re-sending must be
safe: set re-puts the same value; add, compare_set, append and delete_key are
txns that also write this client's receipt key (the op's serial number) and
read it back when their compare fails, so each applies exactly once (see add).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import threading
import time
import uuid
from datetime import timedelta

import torch.distributed as dist

DEFAULT_PREFIX = "/mccl/"
# gRPC codes etcd answers while it has no leader, changes leader or is busy
# (CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNAVAILABLE).
_RETRY_CODES = {1, 4, 8, 14}
_MAX_OPS = 127  # etcd's --max-txn-ops defaults to 128
_DELETE = object()
# A Python Store that only C++ references (PrefixStore(EtcdStore(...)), a
# process group's store, a C++ clone()) loses its Python half when its last
# Python reference goes, and c10d then fails with "Not implemented". Live
# stores are kept here until close().
_LIVE: set[EtcdStore] = set()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _bytes(v) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


def _kv(resp: dict) -> tuple[bytes | None, str]:
    """(value, mod_revision) of a range answer; (None, "0") for no key."""
    kvs = resp.get("kvs")
    if not kvs:
        return None, "0"
    return base64.b64decode(kvs[0].get("value", "")), kvs[0]["mod_revision"]


class _Retry(Exception):
    """This endpoint failed in a way another endpoint may not."""


class _Resend(_Retry):
    """The endpoint is fine, but a request in flight may have been lost with
    the leader it was forwarded to: send it again, there."""


def _status(host: str, port: int, limit: float) -> dict:
    """A node's /v3/maintenance/status (its own view: no leader needed), on a
    connection of its own; {} for a non-200 answer. Raises what the
    connection or the JSON raises."""
    conn = http.client.HTTPConnection(host, port, timeout=limit)
    try:
        conn.request("POST", "/v3/maintenance/status", b"{}", {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return json.loads(resp.read()) if resp.status == 200 else {}
    finally:
        conn.close()


def _readable(sock: socket.socket, timeout: float) -> bool:
    """Whether an answer (or the peer's close) arrives on `sock` within
    `timeout`; nothing is consumed (MSG_PEEK: no descriptor limit, unlike
    select)."""
    sock.settimeout(max(0.001, timeout))
    try:
        sock.recv(1, socket.MSG_PEEK)
        return True
    except TimeoutError:
        return False


def _term(body: dict) -> int:
    try:
        return int(body.get("header", {}).get("raft_term", 0))
    except (TypeError, ValueError):
        return 0


def _endpoint(text: str, url: str | None = None) -> tuple[str, int]:
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})", text.strip())
    if not m or not 0 < int(m[2]) < 65536:
        where = f" in {url!r}" if url else ""
        raise ValueError(f"mccl.elastic.etcd: endpoint {text!r}{where} is not host:port "
                         "(port 1-65535; an IPv6 address in brackets)")
    return m[1].strip("[]"), int(m[2])


def parse_url(url: str) -> tuple[list[tuple[str, int]], str]:
    """``etcd://host1:2379,host2:2379,host3:2379[/prefix]`` (or etcd+http://)
    -> (endpoints, key prefix); anything else is a ValueError quoting it."""
    form = "etcd://host:port[,host:port...][/prefix]"
    scheme, sep, rest = url.partition("://")
    if scheme in ("etcd+https", "etcds", "https"):
        raise ValueError(f"mccl.elastic.etcd: {url!r}: TLS is not implemented (use etcd:// on a "
                         "trusted network)")
    if not sep or scheme not in ("etcd", "etcd+http"):
        raise ValueError(f"mccl.elastic.etcd: {url!r} is not an etcd URL ({form})")
    hosts, _, path = rest.partition("/")
    if any(c in rest for c in "?#@ \t") or not hosts or "//" in "/" + path:
        raise ValueError(f"mccl.elastic.etcd: {url!r} is malformed ({form}; no user, query, "
                         "empty host list or empty path segment)")
    if not re.fullmatch(r"[A-Za-z0-9._~/-]*", path):
        raise ValueError(f"mccl.elastic.etcd: the prefix of {url!r} may hold only letters, digits "
                         "and ._~-/")
    prefix = f"/{path.rstrip('/')}/" if path.strip("/") else DEFAULT_PREFIX
    return [_endpoint(h, url) for h in hosts.split(",")], prefix


def leader_probe(endpoints: list[tuple[str, int]], limit: float = 0.2):
    """A cheap test, for a client that waits out an outage: whether any node
    says it has a leader (a status request, which each node answers from its
    own view). A True may still be followed by a failing call (a node in a
    minority that has not noticed yet); a False saves a call that would hang."""
    def probe() -> bool:
        for host, port in endpoints:
            try:
                if int(_status(host, port, limit).get("leader", 0) or 0):
                    return True
            except (OSError, http.client.HTTPException, ValueError, TypeError):
                pass
        return False
    return probe


def connect_url(url: str, timeout: timedelta | float = timedelta(seconds=300), **kw) -> EtcdStore:
    """An EtcdStore for ``etcd://h1:2379,h2:2379,h3:2379[/prefix]``."""
    endpoints, prefix = parse_url(url)
    return EtcdStore(endpoints, prefix=prefix, timeout=timeout, **kw)


class EtcdStore(dist.Store):
    """c10d Store on etcd. Threads may share one (calls are serialised);
    ``clone()`` gives a thread its own connections. ``close()`` (or ``with``)
    releases it; until then it stays alive even when only c10d holds it."""

    CHECK_S = 0.1  # a request unanswered this long asks its node for the Raft term
    STATUS_S = 0.5  # the longest wait for that status answer

    def __init__(self, endpoints, prefix: str = DEFAULT_PREFIX,
                 timeout: timedelta | float = timedelta(seconds=300), request_timeout: float = 1.5):
        super().__init__()
        self._eps = [e if isinstance(e, tuple) else _endpoint(e) for e in endpoints]
        if not self._eps:
            raise ValueError("mccl.elastic.etcd: EtcdStore needs at least one endpoint")
        if not prefix:
            raise ValueError("mccl.elastic.etcd: the key prefix must not be empty")
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self._pre = self.prefix.encode()
        # UTF-8 never holds 0xff: keys made from str sort below prefix+"\xff",
        # so the receipt (read back after a lost answer) is no user's key.
        self._receipt = _b64(self._pre + b"\xffreceipt/" + uuid.uuid4().hex.encode())
        self._seq = 0
        self._conns: list[http.client.HTTPConnection | None] = [None] * len(self._eps)
        self._errors = ["not tried"] * len(self._eps)
        self._cur = 0
        self._terms = [0] * len(self._eps)  # the newest Raft term each node's answers carried
        self._lock = threading.RLock()
        self.request_timeout = request_timeout
        self.set_timeout(timeout if isinstance(timeout, timedelta) else timedelta(seconds=timeout))
        _LIVE.add(self)

    @property
    def route_host(self) -> str:
        """A host of the cluster: MCCL listens on the interface that routes there."""
        return self._eps[0][0]

    def __repr__(self) -> str:
        return "EtcdStore(etcd://" + ",".join(f"{h}:{p}" for h, p in self._eps) + self.prefix + ")"

    # ---- transport ---------------------------------------------------------
    def _post(self, i: int, path: str, data: bytes, limit: float, may_resend: bool = True) -> dict:
        host, port = self._eps[i]
        conn = self._conns[i]
        if conn is None:
            conn = self._conns[i] = http.client.HTTPConnection(host, port)
        conn.timeout = limit
        if conn.sock is not None:
            conn.sock.settimeout(limit)
        end = time.monotonic() + limit
        try:
            conn.request("POST", path, data, {"Content-Type": "application/json"})
            self._await_answer(i, conn, end, limit, may_resend)
            conn.sock.settimeout(max(0.5, end - time.monotonic()))  # it has begun: read it whole
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException, _Retry) as e:
            conn.close()
            self._conns[i] = None
            if isinstance(e, _Retry):
                raise
            raise _Retry(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from None
        if resp.status == 200:
            body = json.loads(raw)
            self._terms[i] = max(self._terms[i], _term(body))
            return body
        try:
            err = json.loads(raw)
            code, msg = err.get("code"), err.get("error") or err.get("message")
        except ValueError:
            code, msg = None, raw[:200].decode(errors="replace")
        if code == 8 and "space" in str(msg):
            # Full (the quota, 2 GB by default): no retry cures it.
            raise dist.DistStoreError(f"{self!r}: etcd {host}:{port}: {msg}: the cluster is full. Compact and "
                                      "defragment it (etcdctl compact, etcdctl defrag, etcdctl alarm disarm) and run "
                                      "etcd with --auto-compaction-mode=periodic --auto-compaction-retention=1h")
        if code in _RETRY_CODES or (code is None and resp.status >= 500) or "proposal dropped" in str(msg):
            # (raft drops a proposal made while a node knows no leader: it
            # was never applied, so sending it again is always safe)
            raise _Retry(f"HTTP {resp.status}: {msg}")
        if resp.status == 404:
            msg += " (this etcd has no /v3/ gateway: etcd 3.4 or newer is needed)"
        raise dist.DistStoreError(f"{self!r}: etcd {host}:{port} refused {path}: {msg} "
                                  f"(HTTP {resp.status}, gRPC code {code})")

    def _await_answer(self, i: int, conn: http.client.HTTPConnection, end: float, limit: float,
                      may_resend: bool) -> None:
        """Waits until the answer starts to arrive (or ``end``). A follower
        forwards a write to the leader it knows; if that leader is dead the
        write is lost without a word and the follower answers only at its own
        timeout (seconds after the election). So a request that has not
        answered within CHECK_S asks the same node for its Raft term, again
        every CHECK_S: a newer term than the node's answers showed means an
        election happened while the request was in flight, and it is sent
        again there, once per call (`may_resend`; every op is safe to send
        twice, see the module doc). A node whose status connection is refused
        or reset is given up on; one that is merely slow is waited for."""
        while True:
            now = time.monotonic()
            if _readable(conn.sock, min(end, now + self.CHECK_S) - now):
                return
            if time.monotonic() >= end:
                raise _Retry(f"no answer within {limit:.2g} s")
            term = self._status_term(i, min(self.STATUS_S, max(0.05, end - time.monotonic())))
            if term is None:
                continue  # the status request timed out too: a slow node, not a lost request
            if self._terms[i] and term > self._terms[i] and may_resend:
                self._terms[i] = term
                raise _Resend(f"a new Raft term ({term}) began while the request was in flight")
            self._terms[i] = max(self._terms[i], term)

    def _status_term(self, i: int, limit: float) -> int | None:
        """Node i's Raft term (its own view, no leader needed); None if it did
        not answer within `limit`. Raises _Retry if the node refused or
        dropped the connection (it is down)."""
        try:
            st = _status(*self._eps[i], limit)
            return int(st.get("raftTerm", 0)) or _term(st) or None
        except TimeoutError:
            return None
        except (OSError, http.client.HTTPException) as e:
            raise _Retry(f"no answer, and its status request failed ({type(e).__name__}: {e})") from None
        except (ValueError, TypeError):
            return None

    def _call(self, path: str, body: dict, deadline: float, what: str) -> dict:
        """Sends one request, moving through the endpoints until one answers
        or ``deadline`` (time.monotonic) passes."""
        data = json.dumps(body).encode()
        start, rounds, resent = time.monotonic(), 0, set()
        with self._lock:
            while True:
                for _ in self._eps:
                    i = self._cur
                    try:
                        left = deadline - time.monotonic()
                        return self._post(i, path, data, max(0.05, min(self.request_timeout, left)),
                                          may_resend=i not in resent)
                    except _Retry as e:
                        self._errors[i] = str(e)
                        if isinstance(e, _Resend):
                            resent.add(i)  # it stays there: the node knows the new term (once per call)
                        else:
                            self._cur = (i + 1) % len(self._eps)
                    if time.monotonic() >= deadline:
                        errs = "; ".join(f"{h}:{p}: {e}" for (h, p), e in zip(self._eps, self._errors))
                        raise dist.DistNetworkError(
                            f"{self!r}: {what}: no etcd endpoint answered within "
                            f"{time.monotonic() - start:.1f} s ({errs}); is a majority of the "
                            "cluster up and reachable?")
                rounds += 1
                time.sleep(min(0.02 * rounds, 0.2, max(0.0, deadline - time.monotonic())))

    def _deadline(self, timeout=None) -> float:
        t = self.timeout if timeout is None else timeout
        return time.monotonic() + (t.total_seconds() if isinstance(t, timedelta) else float(t))

    def _k(self, key: str) -> bytes:
        return self._pre + key.encode()

    def _read(self, keys: list[str], deadline: float, what: str) -> list[bytes | None]:
        """The keys' values (None: absent), each chunk in one round trip."""
        out: list[bytes | None] = []
        for j in range(0, len(keys), _MAX_OPS):
            chunk = keys[j:j + _MAX_OPS]
            if len(chunk) == 1:
                answers = [self._call("/v3/kv/range", {"key": _b64(self._k(chunk[0]))}, deadline, what)]
            else:
                txn = {"success": [{"request_range": {"key": _b64(self._k(k))}} for k in chunk]}
                r = self._call("/v3/kv/txn", txn, deadline, what)
                answers = [x.get("response_range", {}) for x in r.get("responses", [])]
            out += [_kv(a)[0] for a in answers]
        return out

    def _wait(self, keys: list[str], timeout, what: str) -> list[bytes]:
        deadline = self._deadline(timeout)
        pause = 0.002
        while True:
            got = self._read(keys, deadline, what)
            missing = [k for k, v in zip(keys, got) if v is None]
            if not missing:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                t = self.timeout if timeout is None else timeout
                ms = int(t.total_seconds() * 1000) if isinstance(t, timedelta) else int(t * 1000)
                raise dist.DistStoreError(f"{self!r}: {what}: wait timeout after {ms}ms, keys: "
                                          + ", ".join(self.prefix + k for k in missing))
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)

    def _atomic(self, key: str, what: str, update):
        """Read-modify-write of one key. ``update(value or None)`` gives
        (new value, _DELETE, or None for no write; the op's result)."""
        k = _b64(self._k(key))
        with self._lock:
            deadline = self._deadline()
            value, rev = _kv(self._call("/v3/kv/range", {"key": k}, deadline, what))
            while True:
                write, result = update(value)
                if write is None:
                    return result
                self._seq += 1
                tag = _b64(str(self._seq).encode())
                op = ({"request_delete_range": {"key": k}} if write is _DELETE
                      else {"request_put": {"key": k, "value": _b64(write)}})
                txn = {"compare": [{"key": k, "target": "MOD", "result": "EQUAL", "mod_revision": rev}],
                       "success": [op, {"request_put": {"key": self._receipt, "value": tag}}],
                       "failure": [{"request_range": {"key": k}},
                                   {"request_range": {"key": self._receipt}}]}
                r = self._call("/v3/kv/txn", txn, deadline, what)
                if r.get("succeeded"):
                    return result
                now, mine = (x.get("response_range", {}) for x in r["responses"])
                if mine.get("kvs") and mine["kvs"][0].get("value") == tag:
                    return result  # a copy sent before a lost answer applied
                value, rev = _kv(now)

    # ---- c10d Store --------------------------------------------------------
    def set(self, key: str, value) -> None:
        """One put. Re-sent after a lost answer: a first copy that etcd
        applies late can overwrite a value another client set in between
        (only around a failover, and only for keys written by several)."""
        body = {"key": _b64(self._k(key)), "value": _b64(_bytes(value))}
        self._call("/v3/kv/put", body, self._deadline(), f"set({key!r})")

    def get(self, key: str) -> bytes:
        """The value; waits for the key up to the store's timeout, then
        DistStoreError (as TCPStore)."""
        return self._wait([key], None, f"get({key!r})")[0]

    def add(self, key: str, value: int) -> int:
        """Adds ``value`` (the key starts at 0); returns the sum. Exactly once:
        a txn compared on the key's mod_revision could, once its answer is
        lost, not tell "my first copy applied" from "another client wrote"
        (re-adding would count twice); the receipt written in the same txn
        and read in its failure branch tells them apart."""
        def update(cur):
            try:
                n = int(cur or b"0") + int(value)
            except ValueError:
                raise dist.DistStoreError(f"{self!r}: add({key!r}): the value {cur[:40]!r} is "
                                          "not an integer") from None
            return str(n).encode(), n
        if int(value) == 0:
            # A read where the key exists (a counter polled many times a second
            # must not be a Raft write each time); as TCPStore, it creates an
            # absent one.
            cur = self._read([key], self._deadline(), f"add({key!r}, 0)")[0]
            if cur is not None:
                return update(cur)[1]
        return self._atomic(key, f"add({key!r})", update)

    def compare_set(self, key: str, expected, desired) -> bytes:
        """c10d's semantics: sets ``desired`` when the value equals
        ``expected`` (or the key is absent and ``expected`` is empty);
        returns the value afterwards — for an absent key and a non-empty
        ``expected``, ``expected`` (what TCPStore answers)."""
        expected, desired = _bytes(expected), _bytes(desired)

        def update(cur):
            if cur is None:
                return (desired, desired) if not expected else (None, expected)
            return (desired, desired) if cur == expected else (None, cur)
        return self._atomic(key, f"compare_set({key!r})", update)

    def append(self, key: str, value) -> None:
        """Appends to the value (creates the key)."""
        value = _bytes(value)
        self._atomic(key, f"append({key!r})", lambda cur: ((cur or b"") + value, None))

    def delete_key(self, key: str) -> bool:
        return self._atomic(key, f"delete_key({key!r})",
                            lambda cur: (None, False) if cur is None else (_DELETE, True))

    deleteKey = delete_key  # the name c10d's C++ side (PrefixStore) calls

    def check(self, keys: list[str]) -> bool:
        return all(v is not None for v in self._read(list(keys), self._deadline(), f"check({keys})"))

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        self._wait(list(keys), timeout, f"wait({keys})")

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self._wait(list(keys), None, f"multi_get({keys})")

    def multi_set(self, keys: list[str], values: list) -> None:
        """One txn (atomic) per 127 keys."""
        if len(keys) != len(values):
            raise ValueError(f"{self!r}: multi_set: {len(keys)} keys but {len(values)} values")
        deadline = self._deadline()
        for j in range(0, len(keys), _MAX_OPS):
            puts = [{"request_put": {"key": _b64(self._k(k)), "value": _b64(_bytes(v))}}
                    for k, v in zip(keys[j:j + _MAX_OPS], values[j:j + _MAX_OPS])]
            self._call("/v3/kv/txn", {"success": puts}, deadline, "multi_set")

    def _range_all(self, what: str, **opts) -> dict:
        body = {"key": _b64(self._pre), "range_end": _b64(self._pre + b"\xff"), **opts}
        return self._call("/v3/kv/range", body, self._deadline(), what)

    def num_keys(self) -> int:
        """Keys under this store's prefix."""
        return int(self._range_all("num_keys", count_only=True).get("count", 0))

    getNumKeys = num_keys  # the name c10d's C++ side (PrefixStore) calls

    def list_keys(self) -> list[str]:
        kvs = self._range_all("list_keys", keys_only=True).get("kvs", [])
        return [base64.b64decode(kv["key"])[len(self._pre):].decode() for kv in kvs]

    def has_extended_api(self) -> bool:
        return True

    def clone(self) -> EtcdStore:
        """An independent client (own connections and lock) of the same
        cluster and prefix, e.g. for a watcher thread."""
        return EtcdStore(self._eps, self.prefix, self.timeout, self.request_timeout)

    def close(self) -> None:
        """Deletes this client's receipt key and closes its connections."""
        with self._lock:
            if self._seq:
                try:
                    self._call("/v3/kv/deleterange", {"key": self._receipt},
                               time.monotonic() + self.request_timeout, "close")
                except dist.DistError:
                    pass
            for c in self._conns:
                if c is not None:
                    c.close()
            self._conns = [None] * len(self._eps)
        _LIVE.discard(self)

    def __enter__(self) -> EtcdStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
