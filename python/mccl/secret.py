"""Job secret files for ``MCCL_SECRET_FILE`` (``mccl secret PATH``).

The file holds 32 random bytes from the OS (as 64 hex digits and a newline,
so it survives copy and paste) and is created with mode 600: MCCL refuses a
secret file its group or other users can access. Every rank of a job reads
the same file; the connections' proofs are keyed by it, and nothing secret
goes through the rendezvous store (docs/security.md).

``mccl secret --token [PATH]`` prints the operator's token for the status
page (``mccl elastic serve``): an HMAC of the job secret under a fixed label,
so it needs no file of its own and tells nothing about the secret (nor
about the keys the connections derive from it).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat

_MIN_BYTES = 32
_MAX_FILE_BYTES = 64 * 1024
TOKEN_LABEL = b"mccl status page token v1"


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


def read_secret_file(path: str) -> bytes:
    """The bytes of a job secret file, checked as MCCL checks it
    (comm/job_secret.cc): a regular file (not a link), mode 600 or stricter,
    owned by this user, 32 bytes to 64 KiB. Raises ValueError naming the
    problem."""
    where = f"MCCL_SECRET_FILE={path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ValueError(f"{where}: cannot open it ({e.strerror}); write one with `mccl secret {path}`") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where}: not a regular file (symbolic links are refused too)")
        if st.st_mode & 0o077:
            raise ValueError(f"{where}: its mode is 0{st.st_mode & 0o777:o}, so its group or other users can "
                             f"read or change it; run chmod 600 {path}")
        if st.st_uid != os.geteuid():
            raise ValueError(f"{where}: owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}")
        data = b""
        while len(data) <= _MAX_FILE_BYTES:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > _MAX_FILE_BYTES:
        raise ValueError(f"{where}: larger than {_MAX_FILE_BYTES} bytes; a secret file holds 32 to "
                         f"{_MAX_FILE_BYTES} random bytes")
    if len(data) < _MIN_BYTES:
        raise ValueError(f"{where}: {len(data)} bytes; a secret file needs at least {_MIN_BYTES} random bytes "
                         f"(`mccl secret PATH` writes one)")
    return data


def job_secret(env=None) -> bytes | None:
    """The job secret this process would use (MCCL_SECRET_FILE or
    MCCL_SECRET, as MCCL reads them), or None when neither is set. Raises
    ValueError naming a bad setting (the value itself is never shown)."""
    env = os.environ if env is None else env
    path, text = env.get("MCCL_SECRET_FILE", ""), env.get("MCCL_SECRET", "")
    if path and text:
        raise ValueError("MCCL_SECRET_FILE and MCCL_SECRET are both set; set one")
    if path:
        return read_secret_file(path)
    if text:
        if len(text) < _MIN_BYTES:
            raise ValueError(f"MCCL_SECRET has {len(text)} characters; it needs at least {_MIN_BYTES} "
                             f"(the value is not shown)")
        return text.encode()
    return None


def status_token(secret: bytes) -> str:
    """The status page's token for a job secret (64 hex digits)."""
    return hmac.new(secret, TOKEN_LABEL, hashlib.sha256).hexdigest()
