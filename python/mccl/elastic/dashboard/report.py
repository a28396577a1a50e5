"""`mccl elastic status --fleet`: every job and machine as text, from the
status page's JSON (`--http URL`) or straight from the store (`--store`).

    mccl elastic status --http http://studio-nas:29480     # what the page shows
    mccl elastic status --store studio-nas:29400 --fleet   # the same, read from the store
    mccl elastic status --http URL --json                  # /api/fleet as it is

A page that asks for a token gets MCCL_STATUS_TOKEN, or the token of the
job secret in this environment (MCCL_SECRET_FILE / MCCL_SECRET).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import urllib.error
import urllib.request

from .snapshot import Fleet


def fetch(url: str, timeout_s: float = 10.0) -> dict:
    token = os.environ.get("MCCL_STATUS_TOKEN", "")
    if not token:
        from mccl.secret import job_secret, status_token
        secret = job_secret()
        token = status_token(secret) if secret is not None else ""
    req = urllib.request.Request(url.rstrip("/") + "/api/fleet")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.loads(r.read().decode())


def read_store(address: str) -> dict:
    from ..store import connect
    from .reader import StoreReader
    rs = connect(address, datetime.timedelta(seconds=10))
    rs.patience = 10.0
    data = Fleet(StoreReader(lambda: rs.raw(), rs.describe)).read()
    data["time"] = time.time()
    return data


def _dur(s) -> str:
    if s is None:
        return "–"
    if s < 90:
        return f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _num(x, fmt: str = ".1f") -> str:
    return "–" if x is None else format(x, fmt)


def _clock(t) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "–"


def render(data: dict, where: str) -> str:
    out = []
    c, st = data.get("coordinator"), data.get("store", {})
    head = f"fleet at {where}"
    if c:
        head += (f" (coordinator up {_dur(c['uptime_s'])}, CPU {c['cpu_percent']:.1f} %, "
                 f"{st.get('keys', '–')} store keys{', store error: ' + c['store_error'] if c['store_error'] else ''})")
    out.append(head)
    for j in data["jobs"]:
        step = f"step {j['step'] if j['step'] is not None else '–'}"
        if j["target"]:
            step += f"/{j['target']} ({100 * (j['progress'] or 0):.1f} %)"
        gen = f"generation {j['generation']} ({j['cause']})" if j["generation"] >= 0 else "no generation yet"
        out.append(f"job {j['name']!r}: {j['state']}, {gen}, {j['world']} members, {step}, "
                   f"{_num(j['samples_per_s'])} samples/s, loss {_num(j['loss'], '.4g')}, "
                   f"{_num(j['step_s'], '.3f')} s/step, {_dur(j['eta_s'])} to the end; "
                   f"{j['waiting']} joiners waiting; step moved {_dur(j['last_step_age_s'])} ago")
        if j["stopped_by"]:
            out.append(f"  stopped by: {j['stopped_by']}")
        if j["changes_by_cause"]:
            counts = ", ".join(f"{v} {k}" for k, v in sorted(j["changes_by_cause"].items()))
            out.append(f"  changes: {counts} ({_dur(j['stall_s_total'])} stalled in all)")
        for ch in j["changes"][-5:]:
            moved = "".join(x for x in (f", +{ch['joined_n']}" if ch["joined_n"] else "",
                                        f", -{ch['left_n']}" if ch["left_n"] else ""))
            out.append(f"    {'~' if ch['seen'] else ' '}{_clock(ch['time'])} generation {ch['generation']} "
                       f"{ch['cause']}: {ch['world']} members{moved}, stall {_dur(ch['stall_s'])}"
                       + (f", {ch['bytes'] / 1e6:.1f} MB of state sent" if ch["bytes"] else "") + f", step {ch['step']}")
        for r in j.get("slowest", []):
            why = "no status for " + _dur(r["age_s"]) if r["stale"] else f"holds the others back {_dur(r['lag_s'])}/step"
            out.append(f"  slow: rank {r['rank']} {r['host']} ({r['id']}): {why}")
    counts = data.get("counts", {})
    out.append("machines: " + (", ".join(f"{v} {k}" for k, v in sorted(counts.items(), key=lambda x: -x[1]))
                               or "none report"))
    for a in data["agents"]:
        out.append(f"  {a['host']:<24} {a['shown']:<10} {a['reason']}" + (f"  [job {a['job']}]" if a["job"] else ""))
    return "\n".join(out)


def main(http: str | None, store: str | None, as_json: bool) -> int:
    try:
        data = fetch(http) if http else read_store(store)
    except urllib.error.HTTPError as e:
        hint = " (set MCCL_STATUS_TOKEN, or the job secret, for a page that asks for a token)" if e.code == 401 else ""
        print(f"mccl elastic: {http}/api/fleet answered {e.code} {e.reason}{hint}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"mccl elastic: cannot read the fleet from {http or store}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=1) if as_json else render(data, http or store))
    return 0
