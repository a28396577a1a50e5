"""Files of a checkpoint: written hashed and synced, read back hashed.

fsync is F_FULLFSYNC on macOS, where plain fsync leaves the data in the
drive's cache; folders are synced where the OS lets them be opened (not on
Windows; some network filesystems refuse, which is ignored).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

try:
    import fcntl as _fcntl
except ImportError:  # Windows
    _fcntl = None

_CHUNK = 1 << 20


class HashingWriter:
    """What a payload callable writes to: counts and hashes as it goes.
    Write-only: no seek, no tell."""

    def __init__(self, f):
        self._f, self.size, self.sha = f, 0, hashlib.sha256()

    def write(self, b) -> int:
        mv = memoryview(b).cast("B")
        self.sha.update(mv)
        self._f.write(mv)
        self.size += mv.nbytes
        return mv.nbytes

    def flush(self) -> None:
        self._f.flush()

    def writable(self) -> bool:
        return True


def fsync(fd: int) -> None:
    full = getattr(_fcntl, "F_FULLFSYNC", None)
    if full is not None:
        try:
            _fcntl.fcntl(fd, full)
            return
        except OSError:  # not every filesystem has it
            pass
    os.fsync(fd)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: Path, payload) -> tuple[int, str]:
    """Creates `path` from bytes or a callable(binary file); synced. Returns (size, sha256 hex)."""
    with open(path, "xb") as f:
        w = HashingWriter(f)
        if isinstance(payload, (bytes, bytearray, memoryview)):
            w.write(payload)
        elif callable(payload):
            payload(w)
        else:
            raise TypeError(f"mccl.elastic.durable: payload {path.name!r} is a {type(payload).__name__}; "
                            f"give bytes or a callable that writes to a binary file object")
        f.flush()
        fsync(f.fileno())
    return w.size, w.sha.hexdigest()


def sha256_file(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of the file as read now, in 1 MiB chunks."""
    h, size, buf = hashlib.sha256(), 0, bytearray(_CHUNK)
    mv = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(mv[:n])
            size += n
    return size, h.hexdigest()


def newest_mtime(path: Path, now: float) -> float:
    """Newest mtime of a folder and its files (a live writer keeps touching
    the file it writes, however long that takes); `now` if it is gone."""
    try:
        return max([path.stat().st_mtime] + [e.stat().st_mtime for e in os.scandir(path)])
    except FileNotFoundError:
        return now
