"""Liveness a dead process cannot fake: a listening socket per member.

Every process of a job opens a Beacon (a TCP listener on an ephemeral port)
and names it in its join request. A process that waits for another one (the
members of a new generation for its rank 0, rank 0 for a joiner it admitted,
survivors for a rank that has not checked in) holds a connection to that
process's beacon: when the process dies, its kernel closes the connection
(or refuses a new one) and the waiter knows within milliseconds, instead of
waiting out a rendezvous timeout. A machine that vanishes without a reset
(power cut, pulled cable) proves nothing either way: the waiter falls back
on its timeouts.

On accept, the beacon sends one line, ``mccl-beacon <member id>\\n``, and
then nothing: a watcher that reads another id (a port reused by another
process) takes the beacon as unknown, not as the member's. The beacon
never reads what a stranger sends and holds at most 1024 connections.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time

_MAX_CONNECTIONS = 1024


def route_address(toward: str, port: int) -> str:
    """This host's address on the route toward `toward` (the store): the
    address other members reach it by. No packet is sent."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((toward, port or 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class Beacon:
    def __init__(self, member_id: str, advertise: str):
        self.member_id = member_id
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("0.0.0.0" if advertise not in ("127.0.0.1", "localhost") else "127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.setblocking(False)
        self.address = f"{advertise}:{self._sock.getsockname()[1]}"
        self._greeting = f"mccl-beacon {member_id}\n".encode()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="mccl-elastic-beacon", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            for key, _ in self._sel.select(timeout=0.2):
                if key.fileobj is self._sock:
                    try:
                        conn, _ = self._sock.accept()
                    except OSError:
                        continue
                    if len(self._sel.get_map()) > _MAX_CONNECTIONS:
                        conn.close()
                        continue
                    try:
                        conn.setblocking(False)
                        conn.send(self._greeting)
                        self._sel.register(conn, selectors.EVENT_READ)
                    except OSError:
                        conn.close()
                else:  # the watcher went away (or sent something: ignored)
                    conn = key.fileobj
                    try:
                        if conn.recv(4096):
                            continue
                    except OSError:
                        pass
                    self._sel.unregister(conn)
                    conn.close()

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        self._thread.join(timeout=2)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()
        self._sel.close()


class Watch:
    """A connection to one member's beacon. ``dead()`` is True once the
    process is proven gone (its connection refused, closed or reset), False
    while it is there or unknown (no address, no answer yet, another id)."""

    def __init__(self, member_id: str, address: str, connect_s: float = 0.5):
        self.member_id, self.address = member_id, address
        self._sock: socket.socket | None = None
        self._buf = b""
        self._verified = False
        self._dead = False
        self._unknown = not address
        if address:
            self._open(connect_s)

    def _open(self, connect_s: float) -> None:
        host, _, port = self.address.rpartition(":")
        try:
            self._sock = socket.create_connection((host, int(port)), timeout=connect_s)
            self._sock.setblocking(False)
        except ConnectionRefusedError:
            self._dead = True  # nothing listens where the member said it does
        except (OSError, ValueError):
            self._unknown = True  # no route, or no answer: proves nothing

    def dead(self) -> bool:
        if self._dead or self._unknown or self._sock is None:
            return self._dead
        try:
            data = self._sock.recv(256)
        except BlockingIOError:
            return False
        except OSError:  # reset: the process is gone
            self._dead = True
            return True
        if not data:  # EOF: the process is gone
            self._dead = True
            self._sock.close()
            return True
        if not self._verified:
            self._buf += data
            if b"\n" in self._buf:
                line = self._buf.split(b"\n", 1)[0].decode(errors="replace")
                if line == f"mccl-beacon {self.member_id}":
                    self._verified = True
                else:
                    self._unknown = True  # another process holds that port now
                    self._sock.close()
        return False

    def alive(self) -> bool:
        """Proven there now: it answered with the member's id and has not closed."""
        return not self.dead() and self._verified and not self._unknown

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass


class Watches:
    """Watches of several members, opened once each (by member id)."""

    def __init__(self, address_of):
        self._address_of = address_of  # member id -> beacon address ("" unknown)
        self._w: dict[str, Watch] = {}

    def _watch(self, member_id: str) -> Watch | None:
        w = self._w.get(member_id)
        if w is None:
            try:
                addr = self._address_of(member_id)
            except Exception:  # noqa: BLE001 - the store is away: unknown
                return None
            w = self._w[member_id] = Watch(member_id, addr)
        return w

    def dead(self, member_id: str) -> bool:
        w = self._watch(member_id)
        return w is not None and w.dead()

    def alive(self, member_id: str) -> bool:
        w = self._watch(member_id)
        return w is not None and w.alive()

    def close(self) -> None:
        for w in self._w.values():
            w.close()
        self._w.clear()


def wait_dead(watch: Watch, within_s: float) -> bool:
    """Test helper: whether `watch` sees its process die within `within_s`."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if watch.dead():
            return True
        time.sleep(0.01)
    return watch.dead()
