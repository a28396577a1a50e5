"""The status page's HTTP server, in the process that runs the store
(`mccl elastic serve --http-port N`):

    GET /            the live page (assets/: HTML, CSS, JS; nothing from elsewhere)
    GET /api/fleet   the snapshot as JSON (snapshot.py): what the page polls, every second
    GET /metrics     Prometheus text (metrics.py)
    GET /healthz     "ok" (open: it tells nothing of the fleet)

One snapshot is read at most every `max_age_s` whatever the number of
viewers (and every `refresh_s` by a thread of its own, which also samples
the night's series), encoded and compressed once, and served as bytes. Who
may read is auth.py's.

Threads: the server's (one per connection, daemons) and the sampler's; the
snapshot cache is behind one lock, and the store reader behind its own.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import resource
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qs, urlencode, urlsplit

from . import metrics
from .auth import Access
from .reader import StoreReader
from .snapshot import Fleet

log = logging.getLogger("mccl.elastic")

DEFAULT_HTTP_PORT = 29480
ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("assets", name).read_bytes()


@dataclass
class Snap:
    data: dict
    body: bytes
    gz: bytes
    at: float


class Coordinator:
    """The snapshot cache and the coordinator's own figures."""

    def __init__(self, fleet: Fleet, access: Access, max_age_s: float = 0.5, refresh_s: float = 2.0):
        self.fleet, self.access = fleet, access
        self.max_age_s, self.refresh_s = max_age_s, refresh_s
        self.started, self.started_wall = time.monotonic(), time.time()
        self.requests: dict[str, int] = {}
        self.viewers: dict[str, float] = {}
        self._snap: Snap | None = None
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._cpu = [(time.monotonic(), time.process_time())]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="mccl-status-sampler", daemon=True)
        self.pages = {"": _asset("index.html"), "login": _asset("login.html")}
        self.assets = {name: _asset(name) for name in ASSETS}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _sample(self) -> None:
        while not self._stop.wait(self.refresh_s if self._snap is not None else 0.0):
            self.current()

    def count(self, path: str, client: str) -> None:
        key = path if path in ("/", "/api/fleet", "/metrics", "/healthz") else \
            "/static" if path.startswith("/static/") else "other"
        with self._count_lock:
            self.requests[key] = self.requests.get(key, 0) + 1
            if key in ("/", "/api/fleet"):
                self.viewers[client] = time.monotonic()

    def current(self) -> Snap:
        with self._lock:
            if self._snap is None or time.monotonic() - self._snap.at >= self.max_age_s:
                self._snap = self._read()
            return self._snap

    def _read(self) -> Snap:
        error = ""
        try:
            data = self.fleet.read()
        except Exception as e:  # noqa: BLE001 - the page says so; the next read tries again
            error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            data = dict(self._snap.data) if self._snap is not None else {"jobs": [], "agents": [], "counts": {},
                                                                         "store": {}}
            log.warning("mccl elastic serve: the status page could not read the store (%s)", error)
        data["coordinator"] = self._health(error)
        data["time"] = round(time.time(), 3)
        body = json.dumps(data, separators=(",", ":")).encode()
        return Snap(data, body, gzip.compress(body, 5), time.monotonic())

    def _health(self, error: str) -> dict:
        now, cpu = time.monotonic(), time.process_time()
        self._cpu.append((now, cpu))
        while len(self._cpu) > 2 and now - self._cpu[1][0] >= 10.0:  # a window of at least 10 s
            self._cpu.pop(0)
        t0, c0 = self._cpu[0]
        with self._count_lock:
            for who in [w for w, t in self.viewers.items() if now - t > 10.0]:
                del self.viewers[who]
            requests, viewers = dict(self.requests), len(self.viewers)
        return {"uptime_s": round(now - self.started, 1), "started": round(self.started_wall, 3),
                "cpu_s": round(cpu, 3), "cpu_percent": round(100.0 * (cpu - c0) / (now - t0), 2) if now > t0 else 0.0,
                "rss_mb": round(_rss_bytes() / 2**20, 1), "threads": threading.active_count(),
                "requests": requests, "requests_total": sum(requests.values()), "viewers": viewers,
                "store_error": error, "auth": self.access.required, "pid": os.getpid(),
                "version": _version(), "snapshot_age_s": 0.0}

    def for_metrics(self) -> dict:
        snap = self.current()
        data = dict(snap.data)
        data["coordinator"] = dict(data["coordinator"], snapshot_age_s=round(time.monotonic() - snap.at, 3))
        return data


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _version() -> str:
    try:
        from mccl._version import __version__
        return __version__
    except Exception:  # noqa: BLE001
        return ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mccl-status"
    sys_version = ""
    timeout = 30  # an idle keep-alive connection is closed after this
    coord: Coordinator  # set on the subclass that start() makes

    def log_message(self, fmt, *args) -> None:  # the counters say it; no line per request
        pass

    def _send(self, code: int, body: bytes, ctype: str, extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy", _CSP)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        c = self.coord
        c.count(path, self.client_address[0])
        try:
            if path == "/healthz":
                return self._send(200, b"ok\n", "text/plain; charset=utf-8", {"Cache-Control": "no-store"})
            if path.startswith("/static/") and path[8:] in c.assets:
                return self._send(200, c.assets[path[8:]], ASSETS[path[8:]], {"Cache-Control": "max-age=60"})
            if path == "/favicon.ico":
                return self._send(200, c.assets["favicon.svg"], ASSETS["favicon.svg"], {"Cache-Control": "max-age=3600"})
            given = query.get("token", [None])[-1]
            if not c.access.allows(self.headers, given):
                return self._refuse()
            if given is not None and c.access.required:
                rest = {k: v for k, v in query.items() if k != "token"}
                where = path + (f"?{urlencode(rest, doseq=True)}" if rest else "")
                return self._send(303, b"", "text/plain", {"Location": where, "Set-Cookie": c.access.cookie(),
                                                           "Cache-Control": "no-store"})
            if path == "/":
                return self._send(200, c.pages[""], "text/html; charset=utf-8", {"Cache-Control": "no-cache"})
            if path == "/api/fleet":
                snap = c.current()
                zipped = "gzip" in self.headers.get("Accept-Encoding", "")
                extra = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
                if zipped:
                    extra["Content-Encoding"] = "gzip"
                return self._send(200, snap.gz if zipped else snap.body, "application/json", extra)
            if path == "/metrics":
                if not metrics.available():
                    return self._send(503, b"mccl elastic serve: /metrics needs prometheus_client "
                                           b"(pip install 'torch-mccl[serve]')\n", "text/plain; charset=utf-8")
                return self._send(200, metrics.render(c.for_metrics), "text/plain; version=0.0.4; charset=utf-8",
                                  {"Cache-Control": "no-store"})
            return self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _refuse(self) -> None:
        extra = {"WWW-Authenticate": 'Bearer realm="mccl status"', "Cache-Control": "no-store"}
        if "text/html" in self.headers.get("Accept", ""):
            return self._send(401, self.coord.pages["login"], "text/html; charset=utf-8", extra)
        return self._send(401, b"mccl elastic serve: this status page needs the operator's token "
                               b"(`mccl secret --token`), as 'Authorization: Bearer TOKEN'\n",
                          "text/plain; charset=utf-8", extra)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class PageServer:
    """A running status page; close() stops it (the store is not touched)."""

    def __init__(self, httpd: _HTTPServer, coord: Coordinator):
        self.httpd, self.coord = httpd, coord
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="mccl-status-http", daemon=True)
        self._thread.start()
        coord.start()

    def close(self) -> None:
        self.coord.stop()
        self.httpd.shutdown()
        self.httpd.server_close()


def start(store_host: str, store_port: int, http_host: str, http_port: int = DEFAULT_HTTP_PORT,
          every_s: float = 10.0, keep_s: float = 86400.0, max_age_s: float = 0.5, refresh_s: float = 2.0,
          env=None) -> PageServer:
    """Serves the status page of the store at store_host:store_port on
    http_host:http_port (0: a free port). Raises ValueError for a bad job
    secret setting and OSError when the port cannot be bound."""
    access = Access.from_env(env)
    fleet = Fleet(StoreReader.tcp(store_host, store_port), every_s=every_s, keep_s=keep_s)
    coord = Coordinator(fleet, access, max_age_s=max_age_s, refresh_s=refresh_s)
    handler = type("BoundHandler", (Handler,), {"coord": coord})
    server_cls = _HTTPServer
    if ":" in http_host:
        server_cls = type("_HTTPServer6", (_HTTPServer,), {"address_family": socket.AF_INET6})
    return PageServer(server_cls((http_host, http_port), handler), coord)
