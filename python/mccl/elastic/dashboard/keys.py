"""The fleet's status keys in the job's store, and the limits on their values.

Written by the members (through Job._publish_status) and the agents
(publish.AgentPublisher); read only by the coordinator (snapshot.py):

    mccl-elastic/<job>/status/m/<member id>   a member's status (member_status)
    mccl-elastic/<job>/status/job             the job's, from rank 0 (job_status)
    mccl-elastic/<job>/history                one JSON line per membership change
                                              (appended by the new generation's rank 0)
    mccl-fleet/jobs                           the jobs' names, one a line (membership.py)
    mccl-fleet/agents                         the agents' hosts, one a line
    mccl-fleet/agent/<host>                   an agent's status (agent_status)

Nothing of it is needed for training: a member or an agent that cannot
write it drops it. Every value is a small JSON object (at most VALUE_MAX
bytes): the coordinator reads each one about once a second.
"""

from __future__ import annotations

import json
import math

AGENTS_KEY = "mccl-fleet/agents"
AGENT_PREFIX = "mccl-fleet/agent/"
JOB_PREFIX = "mccl-elastic/"

VALUE_MAX = 400       # bytes of one status value
TEXT_MAX = 160        # characters of a free-text field (a reason, an error)
NAME_MAX = 96         # characters of a name (host, job, member id)

# What an agent says it is doing (agent.Agent): the page adds "waiting"
# (the worker runs, no job has admitted it yet) and shows an agent that has
# not written for a while as "away".
AGENT_STATES = ("training", "idle", "away", "ineligible", "stopping", "error")


def agent_key(host: str) -> str:
    return AGENT_PREFIX + host


def job_key(job: str, k: str) -> str:
    return f"{JOB_PREFIX}{job}/{k}"


def good_name(name: str) -> bool:
    """A job or host name as the index keys may hold it (no '/', no spaces, printable)."""
    return 0 < len(name) <= NAME_MAX and name.isprintable() and "/" not in name and \
        not any(c.isspace() for c in name)


def names(raw: bytes | None, limit: int) -> list[str]:
    """The names an index key holds (one a line), in order, without
    repeats; the newest `limit` of them."""
    if not raw:
        return []
    out = [n.strip() for n in raw.decode(errors="replace").split("\n")]
    return list(dict.fromkeys(n for n in out if good_name(n)))[-limit:]


def dumps(value: dict) -> str:
    """The compact JSON of a status value; free text is cut so that it stays
    under VALUE_MAX bytes."""
    text = json.dumps(value, separators=(",", ":"))
    if len(text.encode()) > VALUE_MAX:
        value = {k: (v[:40] if isinstance(v, str) and k in ("reason", "error") else v) for k, v in value.items()}
        text = json.dumps(value, separators=(",", ":"))
    return text


# ---- reading values written by others: only known fields, of known types ----
def num(v, lo: float = -math.inf, hi: float = math.inf) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        return None
    return float(v)


def integer(v, lo: int = -(1 << 62), hi: int = 1 << 62) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        return None
    return v


def text(v, limit: int = TEXT_MAX) -> str:
    return v[:limit] if isinstance(v, str) else ""


def loads(raw: bytes | None) -> dict:
    """A status value as a dict ({} when missing, too long or not a JSON object)."""
    if not raw or len(raw) > 64 * 1024:
        return {}
    try:
        d = json.loads(raw.decode())
    except (ValueError, UnicodeDecodeError):
        return {}
    return d if isinstance(d, dict) else {}
