"""The idle agent: starts the fleet's worker when this machine qualifies
(policy.py) and makes it leave the moment its person returns.

Leaving is fast and unconditional: SIGTERM (to the worker's process only,
not its data loader's workers) asks the worker to leave at its next step
boundary (mccl.elastic.Job.leave_on_signals), and after
``leave_deadline_s`` (default 5 s) the whole process group is killed. A
worker that exits on its own is started again when the machine still
qualifies, after a back-off that doubles per failure (10 s to 5 min). On
macOS the worker runs under ``caffeinate -i -w <pid>`` so the Mac does not
idle-sleep while it trains.

With a ``[fleet]`` section the agent also tells the status page what it does
(dashboard/publish.py): training, idle (the machine qualifies, the worker is
not running yet), ineligible (the rules keep it out, and why), stopping,
error, or away (the agent itself stopped). The writes run on a thread of
their own: the store never slows the agent down nor stops it.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

from .activity import ActivityError, Source
from .config import AgentConfig
from .policy import Reading, decide

log = logging.getLogger("mccl.agent")


class Agent:
    def __init__(self, cfg: AgentConfig, source: Source, now=dt.datetime.now, monotonic=time.monotonic,
                 publisher=None):
        self.cfg, self.source, self.now, self.monotonic = cfg, source, now, monotonic
        if publisher is None and cfg.fleet_store:
            from ..elastic.dashboard.publish import AgentPublisher
            publisher = AgentPublisher(cfg.fleet_store, host=cfg.fleet_host, job=cfg.fleet_job,
                                       every_s=cfg.publish_every_s)
        self.publisher = publisher
        self.last_exit: int | None = None
        self.proc: subprocess.Popen | None = None
        self.keepawake: subprocess.Popen | None = None
        self.last_idle: float | None = None
        self.failures = 0
        self.not_before = 0.0
        self.events: list[str] = []
        self._stopping = False  # stop() is under way (a signal must not start another)
        self._exit: str | None = None  # a signal asked the agent to end

    def _event(self, text: str) -> None:
        self.events.append(text)
        log.warning("mccl agent: %s", text)

    def _say(self, state: str, reason: str) -> None:
        """The state the status page shows for this machine (never blocks)."""
        if self.publisher is not None:
            self.publisher.offer(state, reason, self.proc.pid if self.running() else None)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, reason: str) -> None:
        env = dict(os.environ, **self.cfg.env)
        self.proc = subprocess.Popen(self.cfg.command, env=env, start_new_session=True)
        if sys.platform == "darwin" and shutil.which("caffeinate"):
            self.keepawake = subprocess.Popen(["caffeinate", "-i", "-w", str(self.proc.pid)])
        self._event(f"started the worker (pid {self.proc.pid}): {reason}")

    def stop(self, reason: str) -> float:
        """Asks the worker to leave; kills it after the deadline. Returns the
        seconds it took to be gone."""
        p = self.proc
        if p is None or self._stopping:
            return 0.0
        self._stopping = True
        try:
            return self._stop(p, reason)
        finally:
            self._stopping = False

    def _stop(self, p: subprocess.Popen, reason: str) -> float:
        t0 = self.monotonic()
        self._say("stopping", reason)
        self._event(f"asking the worker to leave: {reason}")
        try:
            # The worker alone: its data loader's worker processes share its
            # process group, and a SIGTERM to them makes its step fail instead
            # of leaving at the boundary. The deadline's SIGKILL takes them all.
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=self.cfg.leave_deadline_s)
            how = f"left in {self.monotonic() - t0:.2f} s (exit {p.returncode})"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            how = f"killed after the {self.cfg.leave_deadline_s:g} s deadline"
        self._event(f"worker {how}")
        self.proc = None
        return self.monotonic() - t0

    def tick(self) -> None:
        """One check: read the machine, decide, act."""
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            self.failures = 0 if code == 0 else self.failures + 1
            self.not_before = self.monotonic() + (min(300.0, 10.0 * 2 ** (self.failures - 1))
                                                  if self.failures else 10.0)
            self._event(f"the worker exited with {code}")
            self.proc = None
            self.last_exit = code
        try:
            idle, on_ac = self.source.read()
        except ActivityError as e:
            # Unknown activity: the person may be there. Never start; stop.
            if self.running():
                self.stop(f"cannot read activity ({e})")
            log.warning("mccl agent: %s", e)
            self._say("error", f"cannot read activity ({e})")
            return
        d = decide(self.cfg.rules, Reading(idle, on_ac, self.now()), self.running(), self.last_idle)
        self.last_idle = idle
        if d.work and not self.running() and self.monotonic() >= self.not_before:
            self.start(d.reason)
        elif not d.work and self.running():
            self.stop(d.reason)
        self._say(*self._state(d))

    def _state(self, d) -> tuple[str, str]:
        """What the status page shows after this tick, and why."""
        if self.running():
            return "training", d.reason
        if not d.work:
            return "ineligible", d.reason
        at = dt.datetime.now() + dt.timedelta(seconds=max(0.0, self.not_before - self.monotonic()))
        if self.failures:
            return "error", (f"the worker exited with {self.last_exit} ({self.failures} in a row); "
                             f"starting it again at {at:%H:%M:%S}")
        return "idle", f"{d.reason}; the worker starts again at {at:%H:%M:%S}"

    def run(self) -> None:
        def bye(signum, _frame):
            self._exit = signal.Signals(signum).name
            if self._stopping:
                # A leave is under way: let it finish (a second SIGTERM
                # would end the worker at once); the loop then exits.
                return
            self._bye()

        signal.signal(signal.SIGTERM, bye)
        signal.signal(signal.SIGINT, bye)
        while True:
            self.tick()
            if self._exit is not None:
                self._bye()
            time.sleep(self.cfg.check_every_s)

    def _bye(self) -> None:
        self.stop(f"the agent got {self._exit}")
        if self.publisher is not None:
            self.publisher.offer("away", f"its agent stopped ({self._exit})", None)
            self.publisher.close(0.5)
        sys.exit(0)
