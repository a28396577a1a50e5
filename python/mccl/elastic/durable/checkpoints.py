"""The checkpoint folder: atomic writes, verified reads, pruning (see
__init__.py for the layout and the argument)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .files import fsync_dir, newest_mtime, sha256_file, write_file

log = logging.getLogger("mccl.elastic.durable")

FORMAT, VERSION = "mccl.elastic.checkpoint", 1
MANIFEST = "MANIFEST.json"
PROTECTED_KINDS = ("dormant", "stopped")
STALE_TMP_S = 3600.0
_DIR_RE = re.compile(r"^step-(\d{9,})-([0-9a-f]{8})$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_KIND_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names it and why."""


class CorruptCheckpoint(CheckpointError):
    """Torn or damaged: a file missing, truncated or changed, or the manifest unreadable."""


class _Foreign(CheckpointError):
    """Valid for someone else: another job id or a newer format. Never pruned."""


@dataclass(frozen=True)
class CheckpointRef:
    path: Path
    step: int
    kind: str
    meta: dict
    created: float
    job_id: str | None = None
    host: str = ""
    pid: int = 0
    files: dict = field(default_factory=dict)  # name -> (size, sha256 hex)

    @property
    def nbytes(self) -> int:
        return sum(size for size, _ in self.files.values())

    def _entry(self, name: str) -> tuple[int, str]:
        if name not in self.files:
            raise KeyError(f"mccl.elastic.durable: checkpoint {self.path} has no file {name!r} "
                           f"(it has {sorted(self.files)})")
        return self.files[name]

    def open(self, name: str):
        """The payload file, opened for binary reading; not verified (read() is)."""
        self._entry(name)
        return open(self.path / name, "rb")

    def read(self, name: str) -> bytes:
        """The payload file's bytes, checked against the manifest's size and sha256."""
        size, sha = self._entry(name)
        try:
            with self.open(name) as f:
                data = f.read()
        except FileNotFoundError:
            if not self.path.is_dir():
                raise  # the whole checkpoint was pruned
            raise CorruptCheckpoint(f"mccl.elastic.durable: {self.path / name} is missing "
                                    f"(the manifest lists it with {size} bytes)") from None
        if len(data) != size:
            raise CorruptCheckpoint(f"mccl.elastic.durable: {self.path / name} is {len(data)} bytes, the "
                                    f"manifest says {size}: truncated or damaged after it was written")
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            raise CorruptCheckpoint(f"mccl.elastic.durable: sha256 of {self.path / name} is {got[:12]}…, the "
                                    f"manifest says {sha[:12]}…: damaged after it was written")
        return data


def check_args(step, kind, meta) -> dict:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"mccl.elastic.durable: step must be an int >= 0, got {step!r}")
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise ValueError(f"mccl.elastic.durable: kind must be a short lower-case word such as 'periodic', "
                         f"'dormant' or 'stopped', got {kind!r}")
    meta = dict(meta or {})
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise TypeError(f"mccl.elastic.durable: meta must be JSON-serialisable (it goes into "
                        f"{MANIFEST}): {e}") from e
    return meta


class Checkpoints:
    """The checkpoints of one job in ``root``; see the module's doc.
    Thread-safe for one writer thread and any number of reader threads."""

    def __init__(self, root: str | os.PathLike, keep: int = 2, job_id: str | None = None):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"mccl.elastic.durable: keep must be an int >= 1, got {keep!r}")
        self.root, self.keep, self.job_id = Path(root), keep, job_id
        self._good: set[str] = set()  # folder names written or verified here

    def __repr__(self) -> str:
        return f"Checkpoints({str(self.root)!r}, keep={self.keep}, job_id={self.job_id!r})"

    # ---- writing ----------------------------------------------------------
    def write(self, step: int, files: dict, kind: str = "periodic", meta: dict | None = None) -> CheckpointRef:
        """Writes one checkpoint atomically (payloads: bytes, or callables
        given a write-only binary file), then prunes. Blocking."""
        meta = check_args(step, kind, meta)
        for name in files:
            if not isinstance(name, str) or not _NAME_RE.match(name) or name == MANIFEST:
                raise ValueError(f"mccl.elastic.durable: payload name {name!r} must be a plain file name "
                                 f"(letters, digits, '.', '_', '-'), not {MANIFEST}")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            entries = {name: write_file(tmp / name, payload) for name, payload in files.items()}
            manifest = {"format": FORMAT, "version": VERSION, "job_id": self.job_id, "step": step,
                        "kind": kind, "created": time.time(), "host": socket.gethostname(),
                        "pid": os.getpid(), "meta": meta,
                        "files": {n: {"size": s, "sha256": h} for n, (s, h) in entries.items()}}
            write_file(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
            fsync_dir(tmp)
            final = self.root / f"step-{step:09d}-{uuid.uuid4().hex[:8]}"
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(self.root)
        self._good.add(final.name)
        ref = _ref(final, manifest)
        try:
            self._prune(ref)
        except OSError as e:  # the checkpoint is safe; pruning is tidying
            log.warning("mccl.elastic.durable: pruning %s after writing step %d failed: %s", self.root, step, e)
        return ref

    # ---- reading ----------------------------------------------------------
    def scan(self) -> list:
        """[(folder name, CheckpointRef or None, problem or None)], newest
        first; manifests parsed, files not checked."""
        try:
            names = [e.name for e in os.scandir(self.root) if _DIR_RE.match(e.name)]
        except FileNotFoundError:
            return []
        rows = []
        for name in names:
            try:
                ref, problem = self._load(self.root / name), None
                key = (ref.step, ref.created, name)
            except FileNotFoundError:
                continue  # pruned by someone else since the listing
            except CheckpointError as e:
                ref, problem = None, e
            except OSError as e:  # not damage: never pruned for it
                ref, problem = None, CheckpointError(f"mccl.elastic.durable: {self.root / name}/{MANIFEST} "
                                                     f"cannot be read: {e}")
            if ref is None:
                key = (int(_DIR_RE.match(name).group(1)), 0.0, name)
            rows.append((key, name, ref, problem))
        rows.sort(key=lambda r: r[0], reverse=True)
        return [r[1:] for r in rows]

    def latest(self, verify: bool = True) -> CheckpointRef | None:
        """The newest checkpoint whose manifest parses and whose files all
        match it (verify=False: match in size only, no hashing); others are
        skipped with one warning each."""
        return self.newest(self.verify if verify else self._check_sizes)[0]

    def newest(self, check) -> tuple[CheckpointRef | None, object]:
        """(ref, check(ref)) for the newest checkpoint with a parsable
        manifest that `check` accepts; it refuses one by raising
        CheckpointError or OSError (one warning each). (None, None) if none."""
        for name, ref, problem in self.scan():
            try:
                if problem is not None:
                    raise problem
                return ref, check(ref)
            except FileNotFoundError:
                continue  # pruned by someone else since the listing
            except (CheckpointError, OSError) as e:
                log.warning("mccl.elastic.durable: skipping checkpoint %s: %s", self.root / name, _why(e))
        return None, None

    def verify(self, ref: CheckpointRef) -> CheckpointRef:
        """Raises CorruptCheckpoint unless every file of `ref` has the
        manifest's size and sha256 (reads all of them)."""
        self._check_sizes(ref)
        for name, (size, sha) in ref.files.items():
            got_size, got = sha256_file(ref.path / name)
            if got_size != size or got != sha:
                self._good.discard(ref.path.name)
                raise CorruptCheckpoint(f"mccl.elastic.durable: sha256 of {ref.path / name} is {got[:12]}…, "
                                        f"the manifest says {sha[:12]}…: the file changed after it was written "
                                        f"(disk or network damage, or someone edited it)")
        self._good.add(ref.path.name)
        return ref

    def _check_sizes(self, ref: CheckpointRef) -> None:
        for name, (size, _) in ref.files.items():
            try:
                got = os.stat(ref.path / name).st_size
            except FileNotFoundError:
                if not ref.path.is_dir():
                    raise
                raise CorruptCheckpoint(f"mccl.elastic.durable: {ref.path / name} is missing "
                                        f"(the manifest lists it with {size} bytes)") from None
            if got != size:
                raise CorruptCheckpoint(f"mccl.elastic.durable: {ref.path / name} is {got} bytes, the manifest "
                                        f"says {size}: truncated or damaged after it was written")

    def _load(self, path: Path) -> CheckpointRef:
        try:
            raw = (path / MANIFEST).read_bytes()
        except FileNotFoundError:
            if not path.is_dir():
                raise
            raise CorruptCheckpoint(f"mccl.elastic.durable: {path} has no {MANIFEST} (torn: the folder was "
                                    f"damaged, or made by something other than Checkpoints.write)") from None
        try:
            m = json.loads(raw)
            if m.get("format") != FORMAT or not isinstance(m.get("version"), int):
                raise ValueError(f"format {m.get('format')!r}, expected {FORMAT!r}")
            if m["version"] > VERSION:
                raise _Foreign(f"mccl.elastic.durable: {path} has format version {m['version']}, this mccl "
                               f"reads up to {VERSION}: written by a newer mccl")
            ref = _ref(path, m)
        except _Foreign:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptCheckpoint(f"mccl.elastic.durable: {path / MANIFEST} does not parse: {e}") from None
        if ref.step != int(_DIR_RE.match(path.name).group(1)):
            raise CorruptCheckpoint(f"mccl.elastic.durable: {path} holds step {ref.step}: the folder was renamed")
        if self.job_id is not None and ref.job_id != self.job_id:
            raise _Foreign(f"mccl.elastic.durable: {path} belongs to job {ref.job_id!r}, not {self.job_id!r}: "
                           f"give every job its own folder")
        return ref

    # ---- pruning ----------------------------------------------------------
    def _good_here(self, ref: CheckpointRef) -> bool | None:
        """True: verified (once per object); False: damaged; None: unreadable now."""
        if ref.path.name in self._good:
            return True
        try:
            self.verify(ref)
            return True
        except CorruptCheckpoint as e:
            log.warning("mccl.elastic.durable: removing checkpoint %s: %s", ref.path, _why(e))
            return False
        except OSError as e:
            log.warning("mccl.elastic.durable: keeping checkpoint %s, which cannot be read now: %s", ref.path, e)
            return None

    def _prune(self, written: CheckpointRef) -> None:
        kept, protected, doomed = 0, False, []
        for name, ref, problem in self.scan():
            if name == written.path.name:
                kept, protected = kept + 1, protected or written.kind in PROTECTED_KINDS
                continue
            if problem is not None:
                if isinstance(problem, CorruptCheckpoint):
                    log.warning("mccl.elastic.durable: removing checkpoint %s: %s", self.root / name, _why(problem))
                    doomed.append(name)
                continue
            is_protected = ref.kind in PROTECTED_KINDS
            if kept >= self.keep and (protected or not is_protected):
                doomed.append(name)
                continue
            good = self._good_here(ref)
            if good is False:
                doomed.append(name)
            elif good:
                kept += kept < self.keep
                protected = protected or is_protected
        for name in doomed:
            trash = self.root / f".trash-{uuid.uuid4().hex}"
            try:
                os.rename(self.root / name, trash)
            except FileNotFoundError:
                continue
            shutil.rmtree(trash, ignore_errors=True)
            self._good.discard(name)
            log.debug("mccl.elastic.durable: pruned %s", self.root / name)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        now = time.time()
        for e in os.scandir(self.root):
            if e.name.startswith(".trash-"):
                shutil.rmtree(e.path, ignore_errors=True)
            elif e.name.startswith(".tmp-") and now - newest_mtime(Path(e.path), now) > STALE_TMP_S:
                log.info("mccl.elastic.durable: removing %s, left by a writer that died", e.path)
                shutil.rmtree(e.path, ignore_errors=True)


def _ref(path: Path, m: dict) -> CheckpointRef:
    files = {}
    for name, e in m["files"].items():
        if not _NAME_RE.match(name) or not isinstance(e["size"], int) or len(e["sha256"]) != 64:
            raise ValueError(f"bad entry for file {name!r}")
        files[name] = (e["size"], e["sha256"])
    if not isinstance(m["step"], int) or not isinstance(m["meta"], dict):
        raise ValueError("step or meta has the wrong type")
    return CheckpointRef(path=path, step=m["step"], kind=str(m["kind"]), meta=m["meta"],
                         created=float(m["created"]), job_id=m.get("job_id"), host=str(m.get("host", "")),
                         pid=int(m.get("pid", 0)), files=files)


def _why(e: Exception) -> str:
    return str(e).removeprefix("mccl.elastic.durable: ")
