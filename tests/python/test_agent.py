"""mccl agent: the studio's rules, the activity readers (recorded macOS and
Linux output), the config's strictness, the start/leave/kill cycle of a real
worker process, and the service files it installs."""

from __future__ import annotations

import datetime as dt
import os
import plistlib
import subprocess
import sys
import threading
import time

import pytest

from mccl.agent import Agent, Reading, Rules, Window, decide, parse
from mccl.agent.activity import (ActivityError, FileSource, parse_ioreg_idle_ns, parse_loginctl_idle,
                                 parse_pmset_ac)
from mccl.agent.install import install

NIGHT = dt.datetime(2026, 12, 3, 23, 30)
DAY = dt.datetime(2026, 12, 3, 14, 0)


@pytest.mark.parametrize("idle_min,now,on_ac,running,last,work", [
    (20, NIGHT, True, False, None, True),     # away 20 min at night on AC: work
    (5, NIGHT, True, False, None, False),     # not away long enough
    (20, DAY, True, False, None, False),      # outside the window
    (20, NIGHT, False, False, None, False),   # on battery
    (20, NIGHT, None, False, None, True),     # power unknown (a desktop): allowed
    (0.1, NIGHT, True, True, 40 * 60, False), # running, and input seen: leave now
    (45, NIGHT, True, True, 44 * 60, True),   # running, still away
])
def test_policy(idle_min, now, on_ac, running, last, work):
    rules = Rules(idle_minutes=15, window=Window.parse("20:00-08:00"), require_ac=True)
    d = decide(rules, Reading(idle_min * 60, on_ac, now), running, last)
    assert d.work is work, d.reason
    assert d.reason


def test_window_wraps_midnight_and_is_parsed_strictly():
    w = Window.parse("20:00-08:00")
    assert w.contains(dt.time(23, 59)) and w.contains(dt.time(0, 0)) and w.contains(dt.time(7, 59))
    assert not w.contains(dt.time(8, 0)) and not w.contains(dt.time(19, 59))
    assert Window.parse("09:00-17:00").contains(dt.time(12, 0))
    for bad in ("8-20", "25:00-08:00", "20:00-08:61", "", "20:00"):
        with pytest.raises(ValueError):
            Window.parse(bad)


def test_activity_file_is_read_strictly(tmp_path):
    f = tmp_path / "activity"
    src = FileSource(str(f))
    for text, want in (("600", (600.0, None)), ("0 ac", (0.0, True)), ("12.5 Battery", (12.5, False))):
        f.write_text(text)
        assert src.read() == want, text
    # nan would pass "idle >= threshold" checks as neither; a power word
    # other than ac/battery would read as battery: both refused, named.
    for text, why in (("nan", "not idle seconds"), ("inf ac", "not idle seconds"), ("-1", "not idle seconds"),
                      ("x", "not idle seconds"), ("600 mains", "power source 'mains'"), ("", "is empty")):
        f.write_text(text)
        with pytest.raises(ActivityError, match=why):
            src.read()


def test_activity_parsers_on_recorded_output():
    ioreg = '''    | |   "HIDIdleTime" = 123456789012\n    | |   "HIDParameters" = {}'''
    assert parse_ioreg_idle_ns(ioreg) == pytest.approx(123.456789012)
    with pytest.raises(ActivityError):
        parse_ioreg_idle_ns("no such key")
    assert parse_pmset_ac("Now drawing from 'AC Power'\n -InternalBattery-0 100%") is True
    assert parse_pmset_ac("Now drawing from 'Battery Power'\n") is False
    assert parse_pmset_ac("") is None
    now = 1_700_000_000 * 1e6
    assert parse_loginctl_idle("IdleHint=yes\nIdleSinceHint=%d\n" % (now - 90e6), now) == pytest.approx(90)
    assert parse_loginctl_idle("IdleHint=no\nIdleSinceHint=0\n", now) == 0.0


def test_config_is_strict(tmp_path):
    good = '''
[rules]
idle_minutes = 10
window = "20:00-08:00"
[activity]
source = "file"
file = "/tmp/x"
[worker]
command = ["python3", "train.py"]
env = { MCCL_SOCKET_IFNAME = "en0" }
leave_deadline_s = 3
'''
    cfg = parse(good)
    assert cfg.rules.idle_minutes == 10 and cfg.activity_arg == "/tmp/x" and cfg.leave_deadline_s == 3
    for bad, words in (
        (good.replace("idle_minutes", "idle_minuts"), "unknown key rules.idle_minuts"),
        (good + "\n[extra]\nx = 1\n", "unknown section [extra]"),
        (good.replace('command = ["python3", "train.py"]', 'command = "python3 train.py"'), "worker.command"),
        (good.replace("leave_deadline_s = 3", "leave_deadline_s = -1"), "positive"),
        (good.replace('"20:00-08:00"', '"tonight"'), "window"),
        (good.replace("idle_minutes = 10", "idle_minutes = true"), "must be a number"),
    ):
        with pytest.raises(ValueError) as e:
            parse(bad)
        assert words in str(e.value), (words, str(e.value))


WORKER = r'''
import signal, sys, time
mode = sys.argv[1]
def leave(*_):
    print("leaving", flush=True)
    sys.exit(0)
terms = []
def slow_leave(*_):
    terms.append(1)
    print(f"SIGTERM {len(terms)}", flush=True)
if mode == "polite":
    signal.signal(signal.SIGTERM, leave)
elif mode == "slow":  # finishes its step 0.6 s after the first SIGTERM
    signal.signal(signal.SIGTERM, slow_leave)
    while not terms:
        time.sleep(0.01)
    end = time.monotonic() + 0.6
    while time.monotonic() < end:
        time.sleep(0.01)
    sys.exit(0)
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("working", flush=True)
while True:
    time.sleep(0.05)
'''


def agent_for(tmp_path, mode: str, deadline: float = 1.0):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    activity = tmp_path / "activity"
    cfg = parse(f'''
[rules]
idle_minutes = 1
require_ac = true
[activity]
source = "file"
file = "{activity}"
[worker]
command = ["{sys.executable}", "{script}", "{mode}"]
leave_deadline_s = {deadline}
''')
    return Agent(cfg, FileSource(str(activity)), now=lambda: NIGHT), activity


def test_agent_starts_when_away_and_the_worker_leaves_when_the_person_returns(tmp_path):
    agent, activity = agent_for(tmp_path, "polite")
    activity.write_text("30 ac")
    agent.tick()
    assert not agent.running()  # 30 s away is not enough
    activity.write_text("120 ac")
    agent.tick()
    assert agent.running()
    activity.write_text("180 ac")
    agent.tick()
    assert agent.running()  # still away
    pid = agent.proc.pid
    activity.write_text("2 ac")  # input: the person is back
    t0 = time.monotonic()
    agent.tick()
    assert not agent.running() and time.monotonic() - t0 < 1.0
    assert any("person is back" in e for e in agent.events)
    assert any("left in" in e for e in agent.events), agent.events
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_worker_that_ignores_the_request_is_killed_at_the_deadline(tmp_path):
    agent, activity = agent_for(tmp_path, "stubborn", deadline=0.5)
    activity.write_text("300 ac")
    agent.tick()
    assert agent.running()
    time.sleep(0.5)  # let it install its handler
    activity.write_text("300 battery")  # the power went: leave
    agent.tick()
    assert not agent.running()
    assert any("killed after the 0.5 s deadline" in e for e in agent.events), agent.events


def test_a_second_stop_during_a_leave_sends_no_second_sigterm(tmp_path):
    # The agent's own SIGTERM arriving while it already asks the worker to
    # leave (its handler calls stop() again) must not signal the worker a
    # second time: a worker's second SIGTERM means "exit now".
    agent, activity = agent_for(tmp_path, "slow", deadline=5.0)
    out = tmp_path / "worker.out"
    with open(out, "w") as f:  # the worker prints each SIGTERM it gets
        activity.write_text("300 ac")
        real_popen = subprocess.Popen
        subprocess.Popen = lambda *a, **k: real_popen(*a, **{**k, "stdout": f})
        try:
            agent.tick()
        finally:
            subprocess.Popen = real_popen
    assert agent.running()
    time.sleep(0.5)  # let it install its handler
    seconds = []
    t = threading.Thread(target=lambda: seconds.append(agent.stop("first")))
    t.start()
    time.sleep(0.2)
    assert agent.stop("second, from a signal handler") == 0.0
    t.join(10)
    assert not agent.running() and seconds and seconds[0] >= 0.5
    assert "SIGTERM 1" in out.read_text() and "SIGTERM 2" not in out.read_text(), out.read_text()


def test_unreadable_activity_never_starts_and_stops_a_running_worker(tmp_path):
    agent, activity = agent_for(tmp_path, "polite")
    agent.tick()  # no file: unknown
    assert not agent.running()
    activity.write_text("600 ac")
    agent.tick()
    assert agent.running()
    activity.unlink()
    agent.tick()
    assert not agent.running()


def test_install_writes_launchd_and_systemd_files(tmp_path):
    cfg = tmp_path / "fleet.toml"
    cfg.write_text('[worker]\ncommand = ["true"]\n')
    msg = install(str(cfg), platform="darwin", home=str(tmp_path))
    plist = tmp_path / "Library" / "LaunchAgents" / "com.mccl.agent.plist"
    doc = plistlib.loads(plist.read_bytes())
    assert doc["ProgramArguments"][-4:] == ["agent", "run", "--config", str(cfg)]
    assert doc["KeepAlive"] is True and "launchctl load -w" in msg
    msg = install(str(cfg), platform="linux", home=str(tmp_path))
    unit = (tmp_path / ".config" / "systemd" / "user" / "mccl-agent.service").read_text()
    assert "ExecStart=" in unit and "agent run --config" in unit and "Restart=always" in unit
    assert "systemctl --user" in msg
    with pytest.raises(ValueError):
        install(str(tmp_path / "missing.toml"), platform="linux", home=str(tmp_path))


def test_agent_check_command(tmp_path):
    activity = tmp_path / "activity"
    activity.write_text("1200 ac")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'[rules]\nidle_minutes = 15\n[activity]\nsource = "file"\nfile = "{activity}"\n'
                   f'[worker]\ncommand = ["true"]\n')
    out = subprocess.run([sys.executable, "-m", "mccl.cli", "agent", "check", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "would work" in out.stdout, out.stdout + out.stderr
