"""Job secret files for ``MCCL_SECRET_FILE`` (``mccl secret PATH``).

The file holds 32 random bytes from the OS (as 64 hex digits and a newline,
so it survives copy and paste) and is created with mode 600: MCCL refuses a
secret file its group or other users can access. Every rank of a job reads
the same file; the connections' proofs are keyed by it, and nothing secret
goes through the rendezvous store (docs/security.md).
"""
from __future__ import annotations

import os
import secrets


def write_secret(path: str, force: bool = False) -> str:
    """Writes a new secret file at ``path``; returns its absolute path.

    Raises FileExistsError when ``path`` exists and ``force`` is false. The
    file is created (or replaced, atomically) with mode 600 before a byte is
    written, so the secret is never readable by others.
    """
    path = os.path.abspath(path)
    if os.path.lexists(path) and not force:
        raise FileExistsError(f"{path} exists; pass --force to replace it (every rank must then get the new one)")
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, (secrets.token_bytes(32).hex() + "\n").encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    return path
