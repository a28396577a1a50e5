"""mccl agent: lends a machine to the fleet while its person is away.

    mccl agent run --config fleet.toml        # the loop (what the service runs)
    mccl agent install --config fleet.toml    # launchd (macOS) / systemd --user (Linux)
    mccl agent check --config fleet.toml      # one reading and what the rules decide
"""

from .agent import Agent
from .config import AgentConfig, load, parse
from .policy import Decision, Reading, Rules, Window, decide

__all__ = ["Agent", "AgentConfig", "Decision", "Reading", "Rules", "Window", "decide", "load", "parse"]
