"""Where the agent learns whether its person is away, and about power.

- macOS: HIDIdleTime from ``ioreg -c IOHIDSystem`` (nanoseconds since the
  last keyboard, mouse or trackpad event, whoever is logged in); mains power
  from ``pmset -g batt`` ("AC Power"; a Mac Studio always says so).
- Linux: logind's IdleHint/IdleSinceHint for the active graphical session
  (``loginctl``); a machine with no session counts as idle since boot.
- ``command``: a command that prints idle seconds (e.g. a site's own probe).
- ``file``: a file holding idle seconds, and optionally "ac"/"battery" on a
  second line (tests, and sites that compute activity elsewhere).

Only the ioreg/pmset and loginctl parsers are platform-specific; they are
pure functions over the commands' text, tested on Linux with recorded output.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path


class ActivityError(RuntimeError):
    pass


def parse_ioreg_idle_ns(text: str) -> float:
    """Seconds idle from ``ioreg -c IOHIDSystem`` output."""
    m = re.search(r'"HIDIdleTime"\s*=\s*(\d+)', text)
    if not m:
        raise ActivityError("ioreg output has no HIDIdleTime")
    return int(m.group(1)) / 1e9


def parse_pmset_ac(text: str) -> bool | None:
    """Whether ``pmset -g batt`` says the machine draws from mains power."""
    m = re.search(r"Now drawing from '([^']+)'", text)
    if not m:
        return None
    return m.group(1) == "AC Power"


def parse_loginctl_idle(text: str, now_us: float) -> float | None:
    """Seconds idle from ``loginctl show-session -p IdleHint -p IdleSinceHint``;
    None when the session is not idle (active now)."""
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if props.get("IdleHint") != "yes":
        return 0.0
    since = int(props.get("IdleSinceHint", "0") or 0)
    return max(0.0, (now_us - since) / 1e6) if since else None


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ActivityError(f"{' '.join(cmd)} failed: {e}") from e


class Source:
    def read(self) -> tuple[float, bool | None]:
        """(seconds idle, on mains power or None if unknown)."""
        raise NotImplementedError


class MacSource(Source):
    def read(self):
        idle = parse_ioreg_idle_ns(_run(["ioreg", "-c", "IOHIDSystem", "-d", "4"]))
        return idle, parse_pmset_ac(_run(["pmset", "-g", "batt"]))


class LogindSource(Source):
    def read(self):
        sessions = _run(["loginctl", "list-sessions", "--no-legend"]).split()
        best = None
        for sid in sessions[::5] if sessions else []:
            out = _run(["loginctl", "show-session", sid, "-p", "IdleHint", "-p", "IdleSinceHint", "-p", "Type"])
            if "Type=x11" not in out and "Type=wayland" not in out:
                continue
            idle = parse_loginctl_idle(out, time.time() * 1e6)
            if idle is not None:
                best = idle if best is None else min(best, idle)
        on_ac = None
        for p in Path("/sys/class/power_supply").glob("*/online"):
            try:
                on_ac = p.read_text().strip() == "1"
            except OSError:
                pass
        return (best if best is not None else float(time.monotonic())), on_ac


class CommandSource(Source):
    def __init__(self, command: str):
        self.command = shlex.split(command)

    def read(self):
        out = _run(self.command).split()
        if not out:
            raise ActivityError(f"{self.command} printed nothing (expected idle seconds)")
        return _idle_and_power(out, f"{self.command} printed")


class FileSource(Source):
    def __init__(self, path: str):
        self.path = Path(path)

    def read(self):
        try:
            lines = self.path.read_text().split()
        except OSError as e:
            raise ActivityError(f"cannot read activity file {self.path}: {e}") from e
        if not lines:
            raise ActivityError(f"activity file {self.path} is empty (expected idle seconds)")
        return _idle_and_power(lines, f"activity file {self.path} holds")


def _idle_and_power(words: list[str], what: str) -> tuple[float, bool | None]:
    """Idle seconds (a finite number, at least 0) and, if given, the power
    source ("ac" or "battery"); anything else is refused, naming it."""
    try:
        idle = float(words[0])
    except ValueError as e:
        raise ActivityError(f"{what} {words[0]!r}, not idle seconds") from e
    if not math.isfinite(idle) or idle < 0:
        raise ActivityError(f"{what} {words[0]!r}, not idle seconds (a finite number, at least 0)")
    if len(words) < 2:
        return idle, None
    power = words[1].lower()
    if power not in ("ac", "battery"):
        raise ActivityError(f"{what} power source {words[1]!r}; expected 'ac' or 'battery'")
    return idle, power == "ac"


def source_for(kind: str, arg: str = "") -> Source:
    if kind == "auto":
        kind = "macos" if sys.platform == "darwin" else "logind"
    if kind == "macos":
        return MacSource()
    if kind == "logind":
        return LogindSource()
    if kind == "command":
        if not arg:
            raise ValueError("mccl agent: activity = \"command\" needs activity_command")
        return CommandSource(arg)
    if kind == "file":
        if not arg:
            raise ValueError("mccl agent: activity = \"file\" needs activity_file")
        return FileSource(arg)
    raise ValueError(f"mccl agent: unknown activity source {kind!r} (auto, macos, logind, command, file)")
