"""The records of an elastic job's protocol, as types.

A job is a sequence of generations. Generation n is written once, whole,
into the store (membership.py: first writer wins) and never changes; its
record says who is in and why the membership changed:

    Generation(members=("mac-01:812:a1b2c3", ...), admitted=7, cause=Cause.JOIN, step=1200, ...)

Records travel as JSON. Parsing is strict: a record that does not parse,
names an unknown cause or carries a field of the wrong type raises
RecordError naming the key and the field, so a corrupt or foreign record is
never half-understood.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum


class RecordError(ValueError):
    """A record in the store that this version cannot read."""


class Cause(str, Enum):
    """Why generation n exists. Live generations have members training;
    the others are states of a job with nobody in it."""
    START = "start"        # the job's founders
    JOIN = "join"          # joiners came in at a step boundary (leavers may have gone at the same one)
    LEAVE = "leave"        # members left gracefully at a step boundary
    PASS = "pass"          # joiners were counted but none could come in (gone, or refused): same members
    CRASH = "crash"        # members died; the survivors went on
    REGROUP = "regroup"    # a failure without a death (a lost link, a timeout): the same members again
    RESUME = "resume"      # members took up a dormant job (or one whose members all died) from its checkpoint
    DORMANT = "dormant"    # every member left; the state is in the checkpoint the record names
    END = "end"            # the job is finished: run() reached its steps, or its user ended it
    STOPPED = "stopped"    # an error stopped the job (see Generation.error); `mccl elastic resume` resumes it

    @property
    def live(self) -> bool:
        return self not in (Cause.DORMANT, Cause.END, Cause.STOPPED)


@dataclass(frozen=True)
class Generation:
    members: tuple[str, ...]
    admitted: int                  # join requests handled so far (1..admitted)
    cause: Cause
    step: int = 0                  # the job's step when the generation began
    incarnation: str = ""          # the job's identity, drawn when it was founded: fences a second job
    signature: str = ""            # the model's and optimizer's structure (signature.py), "" before known
    refused: dict = field(default_factory=dict)     # joiner id -> why it was refused (a mismatch)
    checkpoint: str = ""           # DORMANT/STOPPED/RESUME: the durable checkpoint holding the state at `step`
    error: dict = field(default_factory=dict)       # STOPPED: what stopped it (member, step, samples, error)

    def __post_init__(self):
        object.__setattr__(self, "members", tuple(self.members))
        object.__setattr__(self, "cause", Cause(self.cause))

    @property
    def live(self) -> bool:
        return self.cause.live

    def to_json(self) -> str:
        d = asdict(self)
        d["members"] = list(self.members)
        d["cause"] = self.cause.value
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str | bytes, where: str = "a generation record") -> "Generation":
        d = _object(text, where)
        try:
            members = d["members"]
            if not isinstance(members, list) or not all(isinstance(m, str) and m for m in members):
                raise RecordError(f"mccl.elastic: {where}: 'members' must be a list of member ids, got {members!r}")
            out = Generation(members=tuple(members), admitted=_int(d, "admitted", where),
                             cause=_cause(d.get("cause"), where), step=_int(d, "step", where, 0),
                             incarnation=_str(d, "incarnation", where), signature=_str(d, "signature", where),
                             refused=_dict(d, "refused", where), checkpoint=_str(d, "checkpoint", where),
                             error=_dict(d, "error", where))
        except KeyError as e:
            raise RecordError(f"mccl.elastic: {where} has no {e.args[0]!r}: {str(text)[:200]}") from None
        return out


@dataclass(frozen=True)
class JoinRequest:
    """A process asking to be a member (join/<k> in the store)."""
    id: str
    host: str = ""
    pid: int = 0
    beacon: str = ""       # "ip:port" of its liveness beacon (beacon.py), "" if it has none
    signature: str = ""    # its model's and optimizer's structure
    create: bool = False   # it was told it may found the job (the user's first launch)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str | bytes, where: str = "a join request") -> "JoinRequest":
        d = _object(text, where)
        if not isinstance(d.get("id"), str) or not d["id"]:
            raise RecordError(f"mccl.elastic: {where} has no member id: {str(text)[:200]}")
        return JoinRequest(id=d["id"], host=_str(d, "host", where), pid=_int(d, "pid", where, 0),
                           beacon=_str(d, "beacon", where), signature=_str(d, "signature", where),
                           create=bool(d.get("create", False)))


def _object(text, where: str) -> dict:
    try:
        d = json.loads(text.decode() if isinstance(text, (bytes, bytearray)) else text)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"mccl.elastic: {where} is not JSON ({e}): {str(text)[:200]}") from None
    if not isinstance(d, dict):
        raise RecordError(f"mccl.elastic: {where} is not a JSON object: {str(text)[:200]}")
    return d


def _int(d: dict, key: str, where: str, default=None) -> int:
    v = d[key] if default is None else d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise RecordError(f"mccl.elastic: {where}: {key!r} must be an integer, got {v!r}")
    return v


def _str(d: dict, key: str, where: str) -> str:
    v = d.get(key, "")
    if not isinstance(v, str):
        raise RecordError(f"mccl.elastic: {where}: {key!r} must be a string, got {v!r}")
    return v


def _dict(d: dict, key: str, where: str) -> dict:
    v = d.get(key, {})
    if not isinstance(v, dict):
        raise RecordError(f"mccl.elastic: {where}: {key!r} must be an object, got {v!r}")
    return v


def _cause(v, where: str) -> Cause:
    try:
        return Cause(v)
    except ValueError:
        raise RecordError(f"mccl.elastic: {where}: unknown cause {v!r} (a newer MCCL wrote it?)") from None
