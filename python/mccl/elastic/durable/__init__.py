"""Durable checkpoints of an elastic job: atomic writes, verified loads.

The fleet empties every morning and a power cut may come at any step, so the
job's state goes to a folder every member can read and write (a studio's
SMB/NFS share) and the first member of the evening resumes from it.

Layout::

    root/step-000001200-3f9a1c2e/       one checkpoint: step 1200, a unique suffix
        state.pt                        payload files (any names)
        MANIFEST.json                   written last: format version, job id, step,
                                        kind, creation time, writer's host and pid,
                                        free-form meta, and each file's size and sha256
    root/.tmp-<uuid>/                   a checkpoint being written (or a dead writer's)
    root/.trash-<uuid>/                 a pruned checkpoint being deleted

Atomicity. A writer fills ``.tmp-<uuid>/``, fsyncs every file, writes the
manifest last, fsyncs it and the folder, renames the folder to ``step-…``
and fsyncs the root (F_FULLFSYNC on macOS, where plain fsync leaves the data
in the drive's cache). Readers only look at ``step-…`` folders, and on a
local disk rename is atomic: a reader sees no folder or the complete one,
and after a power cut the rename is only visible if what it names was
already on disk. Pruning renames a folder to ``.trash-…`` before deleting
it, so a reader never sees half a deletion either.

On a network filesystem the server does the rename (atomic on NFS and on
SMB servers backed by a POSIX or NTFS disk) and close-to-open consistency
hands a reader what the writer flushed. Not guaranteed there: another
client's directory listing may lag (a new checkpoint shows up seconds late,
a pruned one lingers and then fails to open); a server may acknowledge a
flush before its disk has the data (NAS write caches, Samba without
``strict sync``), so its power cut can damage the newest checkpoint; FUSE
mounts of object stores rename by copying. What holds everywhere is the
next point.

Verification. Every file's size and sha256 are in the manifest, and the
manifest is written after them: ``latest()`` checks every file of a
checkpoint before returning it and falls back to the next older one,
logging one warning naming the skipped folder and why (torn, truncated,
changed, no or unparsable manifest). ``load_state`` hashes the bytes it is
about to unpickle; ``load_latest_state`` does both in one read per
candidate. Checksums guard against damage, not against an attacker:
``torch.load(weights_only=False)`` runs code, so the folder must be trusted.

Pruning, after each write, keeps (newest first, by step, then creation time):
the one just written, always; the newest ``keep`` valid checkpoints (the one
just written counts among them); and the newest valid one of kind "dormant"
or "stopped" - the last point where every member stopped cleanly, worth
keeping when the periodic saves after it came from a run that went wrong.
Checkpoints that failed verification or have no parsable manifest are
removed; those of another job id or a newer format version are never
touched. Validity is a full hash, done once per checkpoint per Checkpoints
object (those it wrote or verified are remembered), and only for the few
candidates to keep. ``.tmp-`` folders whose newest mtime is over an hour old
are a dead writer's and removed (mtimes only compared at that scale: their
precision and clock skew do not matter). One writer per root at a time (the
job's rank 0): concurrent writers never corrupt a checkpoint, but may prune
more than either meant to.

BackgroundSaver: periodic saves that stall training for one memcpy, or
less. The caller's thread copies every tensor into CPU snapshot buffers
(allocated at the first save, reused while shapes match) and deep-copies
the small Python objects around them; tensors the caller names `deferred`
(mccl.elastic: the parameters and the optimizer's state, which only the
optimizer's step changes) are copied on the background thread instead, and
the caller calls fence() before it changes them. The background thread
then serialises the snapshot straight to the file (no second copy) and
writes the checkpoint. Cost: one copy of
the state in CPU memory, held between saves. At most one save is in flight;
a periodic save requested meanwhile is skipped and counted, a "dormant" or
"stopped" one waits for the save in flight instead.

Threads. Everything here blocks the calling thread until done, except
``BackgroundSaver.snapshot_and_save``, which returns after the snapshot;
the write runs on a daemon thread (``mccl-checkpoint-<step>``) whose errors
are logged once, kept in ``last_error`` and raised by ``wait()``.

    ckpts = Checkpoints("/Volumes/shared/ckpt/vit", keep=2, job_id="vit")
    saver = BackgroundSaver(ckpts)
    if step % 200 == 0:
        saver.snapshot_and_save(step, state.state_dict(), meta={"world": world})
    ...                                     # the last member leaves in the morning:
    saver.snapshot_and_save(step, state.state_dict(), kind="dormant"); saver.wait()
    ...                                     # the first member of the evening:
    ref, sd = load_latest_state(ckpts)     # or: load_state(ckpts.latest())
    if ref is not None:
        state.load_state_dict(sd)

Files: checkpoints.py (the folder), files.py (hashed, synced files),
saver.py (save_state, load_state, BackgroundSaver).
"""

from .checkpoints import (MANIFEST, PROTECTED_KINDS, CheckpointError, CheckpointRef, Checkpoints,
                          CorruptCheckpoint)
from .saver import STATE_FILE, BackgroundSaver, load_latest_state, load_state, save_state

__all__ = ["MANIFEST", "PROTECTED_KINDS", "STATE_FILE", "BackgroundSaver", "CheckpointError", "CheckpointRef",
           "Checkpoints", "CorruptCheckpoint", "load_latest_state", "load_state", "save_state"]
