"""What an elastic job tells its caller: membership changes, and the ways
run() ends other than "done" and "left"."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Change:
    """One membership change, as logged and kept in Job.history."""
    generation: int
    # a records.Cause value: "start", "join", "leave", "crash", "regroup", "pass", "resume",
    # "dormant" (every member left, the state is on disk), "end", "stopped"
    cause: str
    world: int
    left: list[str] = field(default_factory=list)
    joined: list[str] = field(default_factory=list)
    stall_s: float = 0.0  # from the boundary (or the failure) to the new group being ready
    state_bytes: int = 0
    step: int = 0
    parts: dict = field(default_factory=dict)  # where the stall went (seconds)


class Excluded(RuntimeError):
    """This process was left out of the next generation (the others decided it
    had failed); it should exit (its agent may start it again: it joins anew)."""


class Refused(RuntimeError):
    """This process may not join: its model or optimizer does not match the
    job's. The message names the first difference."""


class JobFinished(RuntimeError):
    """The job is over (run() reached its steps, or `mccl elastic end`)."""


class JobStopped(RuntimeError):
    """An error stopped the job on every member: train_step raised (the
    message names the member, the step, the samples and the traceback), the
    ranks disagree on a collective, or a failure kept coming back. The state
    of the last committed step is in the job's checkpoint folder, if it has
    one; `mccl elastic resume --job <id>` lets members take it up again once
    the cause is fixed."""

    def __init__(self, message: str, error: dict | None = None):
        super().__init__(message)
        self.error = dict(error or {})


class JobMissing(RuntimeError):
    """No job of this name exists and this process was not told to found it."""


class Unreadable(Exception):
    """Raised by train_step (or the data loading it calls) for samples it
    cannot read: the job logs them, counts them in ``Job.skipped`` and calls
    train_step again on this member's other samples of the step. The step
    goes on everywhere; the sample is not trained on (and is skipped again,
    by whichever member gets it, in later epochs)."""

    def __init__(self, indices, reason: str = ""):
        self.indices = [int(i) for i in (indices if isinstance(indices, (list, tuple, set)) else [indices])]
        self.reason = reason
        super().__init__(f"unreadable samples {self.indices}" + (f": {reason}" if reason else ""))


class _Left(Exception):
    """A member that asked to leave is not in the generation the others went
    on with: it has left (raised out of a recovery; run() returns "left")."""


class _Done(Exception):
    """The job ended while this member was recovering a failure (its END
    record was written first): run() returns "done"."""


class _Regroup(RuntimeError):
    """The generation this process is in (or was about to form) cannot go on
    as it is: recover it with the others it lists (run() treats it as a
    failure of a link)."""
