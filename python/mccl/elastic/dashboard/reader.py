"""The coordinator's reads of the store: a few round trips per snapshot,
whatever the number of members.

`many(keys)` asks whether all the keys are there (one `check`) and reads
them in one `multi_get`; when some are missing it halves the list until it
has found them, so a snapshot of 200 members' statuses where one has not
written yet costs 17 round trips, not 400. A missing key is never read
(a TCPStore `get` of a missing key waits for it).

Thread affinity: one connection, serialised by a lock; the HTTP threads and
the sampling thread share it.
"""

from __future__ import annotations

import datetime
import threading
from typing import Callable

import torch.distributed as dist


class StoreReader:
    def __init__(self, connect: Callable[[], dist.Store], describe: str):
        self._connect, self.describe = connect, describe
        self._client: dist.Store | None = None
        self._lock = threading.Lock()
        self.round_trips = 0

    @staticmethod
    def tcp(host: str, port: int, timeout_s: float = 5.0) -> "StoreReader":
        """A reader of the TCPStore at host:port (0.0.0.0 and :: read through loopback)."""
        where = "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host
        return StoreReader(lambda: dist.TCPStore(where, port, is_master=False, wait_for_workers=False,
                                                 timeout=datetime.timedelta(seconds=timeout_s)),
                           f"{where}:{port}")

    def _client_now(self) -> dist.Store:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _call(self, fn):
        with self._lock:
            try:
                self.round_trips += 1
                return fn(self._client_now())
            except Exception:
                self._client = None  # a fresh connection next time
                raise

    def has(self, key: str) -> bool:
        return self._call(lambda c: c.check([key]))

    def get(self, key: str) -> bytes | None:
        got = self.many([key])
        return got[key]

    def num_keys(self) -> int:
        return self._call(lambda c: c.num_keys())

    def many(self, keys: list[str]) -> dict[str, bytes | None]:
        """key -> value, or None for a key the store does not hold."""
        out: dict[str, bytes | None] = {}
        present: list[str] = []
        todo = [list(dict.fromkeys(keys))]
        while todo:
            part = todo.pop()
            if not part:
                continue
            if self._call(lambda c: c.check(part)):
                present += part
            elif len(part) == 1:
                out[part[0]] = None
            else:
                todo += [part[:len(part) // 2], part[len(part) // 2:]]
        if present:  # every key found, in one read
            out.update(zip(present, self._multi_get(present)))
        return out

    def _multi_get(self, keys: list[str]) -> list[bytes]:
        def read(c):
            if hasattr(c, "multi_get"):
                return [bytes(v) for v in c.multi_get(keys)]
            return [bytes(c.get(k)) for k in keys]
        return self._call(read)
