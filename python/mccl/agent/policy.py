"""When a machine may work for the fleet: the studio's rules, as pure logic.

A machine qualifies while its person has been away for at least
``idle_minutes`` (no keyboard or mouse input), the clock is inside the
studio's window (e.g. 20:00-08:00, which wraps past midnight), and, if
``require_ac``, it runs on mains power. The person comes first: the moment
input is seen again (idle time drops), the worker is asked to leave.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    start: dt.time
    end: dt.time

    @staticmethod
    def parse(text: str) -> "Window":
        m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*", text or "")
        if not m:
            raise ValueError(f"mccl agent: window {text!r} is not HH:MM-HH:MM (e.g. 20:00-08:00)")
        h1, m1, h2, m2 = (int(x) for x in m.groups())
        if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
            raise ValueError(f"mccl agent: window {text!r} has an hour past 23 or a minute past 59")
        return Window(dt.time(h1, m1), dt.time(h2, m2))

    def contains(self, t: dt.time) -> bool:
        if self.start == self.end:
            return True  # all day
        if self.start < self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end  # wraps past midnight


@dataclass(frozen=True)
class Rules:
    idle_minutes: float = 15.0
    window: Window | None = None   # None: any time of day
    require_ac: bool = True

    def __post_init__(self):
        if self.idle_minutes < 0:
            raise ValueError(f"mccl agent: idle_minutes must be >= 0, got {self.idle_minutes}")


@dataclass(frozen=True)
class Reading:
    """What the machine says now."""
    idle_s: float            # seconds since the last keyboard/mouse input
    on_ac: bool | None       # None: unknown (a desktop without a battery reports AC)
    now: dt.datetime


@dataclass(frozen=True)
class Decision:
    work: bool      # the worker should run
    reason: str


def decide(rules: Rules, r: Reading, running: bool, last_idle_s: float | None = None) -> Decision:
    """Whether the worker should run now. `last_idle_s` (the previous
    reading's idle time) lets a return be seen even when the person touched
    the machine only briefly between two readings: idle time went down."""
    if last_idle_s is not None and r.idle_s + 1.0 < last_idle_s and running:
        return Decision(False, f"input seen (idle {r.idle_s:.0f} s, was {last_idle_s:.0f} s): the person is back")
    if r.idle_s < rules.idle_minutes * 60:
        return Decision(False, f"idle {r.idle_s / 60:.1f} min < {rules.idle_minutes:g} min")
    if rules.window is not None and not rules.window.contains(r.now.time()):
        return Decision(False, f"{r.now:%H:%M} is outside the window "
                               f"{rules.window.start:%H:%M}-{rules.window.end:%H:%M}")
    if rules.require_ac and r.on_ac is False:
        return Decision(False, "on battery")
    return Decision(True, f"idle {r.idle_s / 60:.1f} min" +
                    (f", in the window" if rules.window else "") + (", on AC" if r.on_ac else ""))
