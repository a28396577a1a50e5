"""``mccl agent install``: run the agent at login (macOS launchd) or as a
user service (Linux systemd), restarted if it ever exits."""

from __future__ import annotations

import os
import plistlib
import shlex
import sys
from pathlib import Path

LABEL = "com.mccl.agent"


def agent_argv(config: str) -> list[str]:
    return [sys.executable, "-m", "mccl.cli", "agent", "run", "--config", os.path.abspath(os.path.expanduser(config))]


def launchd_plist(config: str, log_dir: str) -> bytes:
    return plistlib.dumps({
        "Label": LABEL,
        "ProgramArguments": agent_argv(config),
        "RunAtLoad": True,
        "KeepAlive": True,
        "ProcessType": "Background",
        "StandardOutPath": os.path.join(log_dir, "mccl-agent.log"),
        "StandardErrorPath": os.path.join(log_dir, "mccl-agent.log"),
    })


def systemd_unit(config: str) -> str:
    return "\n".join([
        "[Unit]",
        "Description=MCCL idle agent: lends this machine to the training fleet while its person is away",
        "After=network-online.target",
        "",
        "[Service]",
        "ExecStart=" + " ".join(shlex.quote(a) for a in agent_argv(config)),
        "Restart=always",
        "RestartSec=10",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ])


def install(config: str, platform: str = sys.platform, home: str | None = None, dry_run: bool = False) -> str:
    """Writes the service file; returns a message saying where and what to run."""
    home = home or os.path.expanduser("~")
    if not Path(os.path.expanduser(config)).exists():
        raise ValueError(f"mccl agent install: config {config} does not exist")
    if platform == "darwin":
        path = Path(home) / "Library" / "LaunchAgents" / f"{LABEL}.plist"
        body: bytes | str = launchd_plist(config, str(Path(home) / "Library" / "Logs"))
        then = f"launchctl load -w {path}"
    else:
        path = Path(home) / ".config" / "systemd" / "user" / "mccl-agent.service"
        body = systemd_unit(config)
        then = "systemctl --user daemon-reload && systemctl --user enable --now mccl-agent"
    if dry_run:
        text = body.decode() if isinstance(body, bytes) else body
        return f"# would write {path}:\n{text}\n# then: {then}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body)
    return f"wrote {path}\nstart it now with: {then}"
