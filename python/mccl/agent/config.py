"""The fleet's agent configuration: one TOML file for every machine.

    [rules]
    idle_minutes = 15            # the person has been away this long
    window = "20:00-08:00"       # local time; omit for any time of day
    require_ac = true            # never on battery

    [activity]
    source = "auto"              # auto (macos / logind), command, file
    command = ""                 # source = "command": prints idle seconds [ac|battery]
    file = ""                    # source = "file": holds idle seconds [ac|battery]

    [worker]
    command = ["python3", "train.py", "--store", "studio-nas:29400"]
    env = { MCCL_SOCKET_IFNAME = "en0" }
    leave_deadline_s = 5         # after asking it to leave (SIGTERM), kill it
    check_every_s = 2

    [fleet]                      # optional: tell the status page (mccl elastic serve) what this Mac does
    store = "studio-nas:29400"   # the jobs' store (as the worker's --store); omit to publish nothing
    job = "vit"                  # the job this Mac's worker trains in (shown beside it)
    host = ""                    # the name it is shown under (default: this machine's hostname)
    publish_every_s = 5          # its state again at most this often (every change at once)

Every key is checked: an unknown key or a value of the wrong type is an error
naming it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .policy import Rules, Window

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib


@dataclass
class AgentConfig:
    rules: Rules
    activity: str = "auto"
    activity_arg: str = ""
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    leave_deadline_s: float = 5.0
    check_every_s: float = 2.0
    path: str = ""
    fleet_store: str = ""       # [fleet] store: where the agent publishes its state ("" : nowhere)
    fleet_job: str = ""
    fleet_host: str = ""
    publish_every_s: float = 5.0


_SCHEMA = {
    "rules": {"idle_minutes": (int, float), "window": (str,), "require_ac": (bool,)},
    "activity": {"source": (str,), "command": (str,), "file": (str,)},
    "worker": {"command": (list,), "env": (dict,), "leave_deadline_s": (int, float),
               "check_every_s": (int, float)},
    "fleet": {"store": (str,), "job": (str,), "host": (str,), "publish_every_s": (int, float)},
}


def _check(doc: dict, where: str) -> None:
    for section, body in doc.items():
        if section not in _SCHEMA:
            raise ValueError(f"{where}: unknown section [{section}] (expected {', '.join(_SCHEMA)})")
        if not isinstance(body, dict):
            raise ValueError(f"{where}: [{section}] must be a table")
        for key, value in body.items():
            types = _SCHEMA[section].get(key)
            if types is None:
                raise ValueError(f"{where}: unknown key {section}.{key} (expected "
                                 f"{', '.join(_SCHEMA[section])})")
            if isinstance(value, bool) and bool not in types:
                raise ValueError(f"{where}: {section}.{key} = {value!r} must be a number")
            if not isinstance(value, types):
                raise ValueError(f"{where}: {section}.{key} = {value!r} has the wrong type")


def parse(text: str, where: str = "agent config") -> AgentConfig:
    doc = tomllib.loads(text)
    _check(doc, where)
    r, a, w, f = doc.get("rules", {}), doc.get("activity", {}), doc.get("worker", {}), doc.get("fleet", {})
    command = w.get("command", [])
    if not command or not all(isinstance(x, str) for x in command):
        raise ValueError(f"{where}: worker.command must be a non-empty list of strings")
    env = w.get("env", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"{where}: worker.env must map names to strings")
    source = a.get("source", "auto")
    deadline, every = float(w.get("leave_deadline_s", 5.0)), float(w.get("check_every_s", 2.0))
    if deadline <= 0 or every <= 0:
        raise ValueError(f"{where}: worker.leave_deadline_s and worker.check_every_s must be positive")
    every_pub = float(f.get("publish_every_s", 5.0))
    if every_pub <= 0:
        raise ValueError(f"{where}: fleet.publish_every_s must be positive")
    store = f.get("store", "")
    if store:
        _check_store(store, where)
    host = f.get("host", "")
    if host and ("/" in host or any(c.isspace() for c in host) or not host.isprintable() or len(host) > 96):
        raise ValueError(f"{where}: fleet.host = {host!r} must be a name without '/' or spaces")
    return AgentConfig(
        rules=Rules(idle_minutes=float(r.get("idle_minutes", 15.0)),
                    window=Window.parse(r["window"]) if "window" in r else None,
                    require_ac=bool(r.get("require_ac", True))),
        activity=source, activity_arg=a.get("command", "") if source == "command" else a.get("file", ""),
        command=list(command), env=dict(env), leave_deadline_s=deadline, check_every_s=every, path=where,
        fleet_store=store, fleet_job=f.get("job", ""), fleet_host=host, publish_every_s=every_pub)


def _check_store(store: str, where: str) -> None:
    """The [fleet] store address, as mccl.elastic.store.connect takes it."""
    if store.startswith(("etcd://", "etcd+http://")):
        return
    address = store[len("tcp://"):] if store.startswith("tcp://") else store
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{where}: fleet.store = {store!r} is not host:port, tcp://host:port or etcd://...")


def load(path: str) -> AgentConfig:
    p = Path(os.path.expanduser(path))
    try:
        text = p.read_text()
    except OSError as e:
        raise ValueError(f"mccl agent: cannot read {p}: {e}") from e
    return parse(text, str(p))
