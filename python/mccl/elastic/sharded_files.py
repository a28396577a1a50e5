"""A ShardedState's checkpoint folders: written so that a torn or damaged one
is never loaded, and the newest valid one is.

    root/step-000001200-3f9a1c2e/    torch.distributed.checkpoint's files (every
                                     rank its shards, rank 0 `.metadata`), the
                                     job's notes (mccl-meta.pt), and
        MANIFEST.json                written last by rank 0: every file's size
                                     and sha256, the step
    root/latest                      the newest checkpoint's folder name (a hint)

Writing (collective, sharded.py): each rank fsyncs and hashes the files it
wrote; rank 0 gathers the hashes, writes the manifest (synced, renamed into
place), then the pointer, then removes all but the newest `keep` folders.
A folder without a manifest is a write that did not finish: never loaded.
Reading: `newest_valid` tries the pointer's folder, then every other
`step-` folder newest first, hashing each file against the manifest (once
per folder per process: a checkpoint never changes once written) and
logging one warning for each one it skips. Folders of an older MCCL (no
manifest) are taken only where the pointer names them, unverified, as
before.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from .durable.files import fsync, fsync_dir, sha256_file

log = logging.getLogger("mccl.elastic")

MANIFEST = "MANIFEST.json"
META = "mccl-meta.pt"
_VERSION = 1
_RANK_FILE = re.compile(r"^__(\d+)_")
_STEP = re.compile(r"^step-(\d{9})(?:-[0-9a-f]{8})?$")
_LEGACY = re.compile(r"^step-\d{9}$")  # an MCCL before manifests named its folders so

_valid: set[str] = set()  # folders (absolute paths) hashed whole in this process, or written by it
_warned: set[str] = set()  # folders skipped already (one warning each)


def folder_name(step: int, suffix: str) -> str:
    return f"step-{step:09d}-{suffix}"


def own_files(path: str, rank: int) -> list[str]:
    """The files of a just-written checkpoint that `rank` wrote: dcp's
    `__<rank>_*` files; rank 0 also every file no rank's pattern names
    (`.metadata`, the job's notes)."""
    out = []
    for name in sorted(os.listdir(path)):
        m = _RANK_FILE.match(name)
        if (m is not None and int(m.group(1)) == rank) or (m is None and rank == 0 and name != MANIFEST):
            out.append(name)
    return out


def sync_and_hash(path: str, names: list[str]) -> dict:
    """{name: [size, sha256]} of the files, each synced to the disk first."""
    out = {}
    for name in names:
        p = os.path.join(path, name)
        with open(p, "rb") as f:
            fsync(f.fileno())
        out[name] = list(sha256_file(Path(p)))
    return out


def write_manifest(root: str, path: str, step: int, files: dict) -> None:
    """Rank 0, once every rank's files are synced and hashed: the manifest,
    then the pointer (both synced and renamed into place)."""
    body = json.dumps({"format": _VERSION, "step": step, "files": files}, sort_keys=True).encode()
    tmp = os.path.join(path, MANIFEST + ".tmp")
    with open(tmp, "wb") as f:
        f.write(body)
        f.flush()
        fsync(f.fileno())
    os.replace(tmp, os.path.join(path, MANIFEST))
    fsync_dir(Path(path))
    _valid.add(os.path.abspath(path))
    tmp = os.path.join(root, "latest.tmp")
    with open(tmp, "w") as f:
        f.write(os.path.basename(path) + "\n")
        f.flush()
        fsync(f.fileno())
    os.replace(tmp, os.path.join(root, "latest"))
    fsync_dir(Path(root))


def prune(root: str, keep: int, written: str) -> None:
    """All but the newest `keep` checkpoint folders go (the one just written
    stays whatever its step); each is renamed before it is deleted, so a
    reader never meets half of one."""
    folders = [name for name in _step_folders(root) if name != written]
    for name in folders[max(0, keep - 1):]:
        trash = os.path.join(root, f".trash-{name}")
        try:
            os.replace(os.path.join(root, name), trash)
        except OSError:
            continue
        shutil.rmtree(trash, ignore_errors=True)
        _valid.discard(os.path.abspath(os.path.join(root, name)))


def _step_folders(root: str) -> list[str]:
    """`step-` folders, newest first (by step, then modification time)."""
    try:
        names = [n for n in os.listdir(root) if _STEP.match(n) and os.path.isdir(os.path.join(root, n))]
    except OSError:
        return []

    def key(n):
        try:
            mtime = os.path.getmtime(os.path.join(root, n))
        except OSError:
            mtime = 0.0
        return int(_STEP.match(n).group(1)), mtime
    return sorted(names, key=key, reverse=True)


def pointed(root: str) -> str | None:
    try:
        with open(os.path.join(root, "latest")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def check(path: str) -> str | None:
    """Why the checkpoint folder is not valid (None: it is). Hashes every
    file against the manifest the first time it is asked in this process."""
    key = os.path.abspath(path)
    if key in _valid:
        return None
    try:
        with open(os.path.join(path, MANIFEST), "rb") as f:
            m = json.loads(f.read().decode())
        files = m["files"]
        if int(m["format"]) > _VERSION:
            return f"manifest format {m['format']} is newer than this MCCL's ({_VERSION})"
    except FileNotFoundError:
        return "no manifest (its write did not finish)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable manifest: {e}"
    if ".metadata" not in files or META not in files:
        return "the manifest lists no .metadata or no " + META
    for name, (size, digest) in sorted(files.items()):
        p = Path(path) / name
        try:
            got_size = p.stat().st_size
            if got_size != size:
                return f"{name}: {got_size} bytes, the manifest says {size}"
            if sha256_file(p)[1] != digest:
                return f"{name}: its sha256 differs from the manifest's"
        except OSError as e:
            return f"{name}: {e}"
    _valid.add(key)
    return None


def legacy(path: str) -> bool:
    """Written by an MCCL before manifests (its pointer vouches for it)."""
    return bool(_LEGACY.match(os.path.basename(path))) and not os.path.exists(os.path.join(path, MANIFEST))


def newest_valid(root: str) -> str | None:
    """The newest valid checkpoint folder's name (see the module's doc)."""
    hint = pointed(root)
    names = _step_folders(root)
    order = ([hint] if hint in names else []) + [n for n in names if n != hint]
    for name in order:
        path = os.path.join(root, name)
        if name == hint and legacy(path):
            if os.path.exists(os.path.join(path, ".metadata")) and os.path.exists(os.path.join(path, META)):
                return name
        why = check(path)
        if why is None:
            return name
        if path not in _warned:
            _warned.add(path)
            log.warning("mccl.elastic: sharded checkpoint %s is skipped: %s", path, why)
    return None
