"""/metrics: the snapshot in Prometheus's text format, through
prometheus_client (the `serve` extra: pip install 'torch-mccl[serve]').

A custom collector over the latest snapshot, in a registry of its own: no
global mutable metrics, and a scrape reads nothing the page did not. The
metric names, their labels and what to alert on are in docs/status-page.md
(a test checks that the two lists agree).
"""

from __future__ import annotations

JOB_STATES = ("running", "dormant", "finished", "stopped", "not started", "unreadable")


def available() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


class FleetCollector:
    """Collects from `snap()` (the server's cached snapshot, with the
    coordinator's own figures under "coordinator")."""

    def __init__(self, snap):
        self.snap = snap

    def describe(self):
        return []  # no metrics at registration: collect() reads the store's snapshot

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        s = self.snap()
        jl = ["job"]
        g = {name: GaugeMetricFamily(name, doc, labels=jl) for name, doc in (
            ("mccl_job_members", "Members of the job's current generation"),
            ("mccl_job_step", "The job's step (the last one a member began)"),
            ("mccl_job_target_step", "The step the job ends at (its run's steps, or an end request), where known"),
            ("mccl_job_generation", "The job's latest generation number"),
            ("mccl_job_samples_per_second", "Samples per second of the whole job (0 unless running)"),
            ("mccl_job_step_seconds", "Mean step time of rank 0's last 20 steps"),
            ("mccl_job_loss", "The loss of rank 0's last step, where train_step returns one"),
            ("mccl_job_last_step_age_seconds", "Seconds since the coordinator saw the job's step move"),
            ("mccl_job_waiting_joiners", "Join requests not yet handled"),
            ("mccl_job_eta_seconds", "Seconds to the target step at the current step time"),
            ("mccl_job_status_age_seconds", "Age of rank 0's last status (by rank 0's clock)"))}
        state = GaugeMetricFamily("mccl_job_state", "1 for the job's state (running, dormant, finished, stopped, "
                                  "not started, unreadable), 0 for the others", labels=["job", "state"])
        changes = CounterMetricFamily("mccl_job_changes", "Membership changes (generations) by cause",
                                      labels=["job", "cause"])
        stall = CounterMetricFamily("mccl_job_stall_seconds", "Seconds the members stalled in membership changes",
                                    labels=["job"])
        ml = ["job", "member", "host", "rank"]
        mg = {name: GaugeMetricFamily(name, doc, labels=ml) for name, doc in (
            ("mccl_member_step_seconds", "A member's mean step time (its last 20 steps)"),
            ("mccl_member_samples_per_second", "A member's own samples per second"),
            ("mccl_member_boundary_seconds", "A member's mean wait at the step boundary (small: the others wait for it)"),
            ("mccl_member_lag_seconds", "How much longer than the median member the others wait for this one per step"),
            ("mccl_member_status_age_seconds", "Age of the member's last status (a stuck or gone member grows it)"),
            ("mccl_member_wire_sent_bytes_per_second", "Bytes per second the member's MCCL sockets sent (every group)"),
            ("mccl_member_wire_received_bytes_per_second", "Bytes per second the member's MCCL sockets received"))}
        for j in s.get("jobs", []):
            lab = [j["name"]]
            values = {"mccl_job_members": j["world"], "mccl_job_step": j["step"], "mccl_job_target_step": j["target"],
                      "mccl_job_generation": j["generation"], "mccl_job_samples_per_second": j["samples_per_s"] or 0.0,
                      "mccl_job_step_seconds": j["step_s"], "mccl_job_loss": j["loss"],
                      "mccl_job_last_step_age_seconds": j["last_step_age_s"], "mccl_job_waiting_joiners": j["waiting"],
                      "mccl_job_eta_seconds": j["eta_s"], "mccl_job_status_age_seconds": j["status_age_s"]}
            for name, v in values.items():
                if v is not None:
                    g[name].add_metric(lab, float(v))
            for st in JOB_STATES:
                state.add_metric([j["name"], st], 1.0 if j["state"] == st else 0.0)
            for cause, count in sorted(j["changes_by_cause"].items()):
                changes.add_metric([j["name"], cause], count)
            stall.add_metric(lab, j["stall_s_total"])
            for r in j["members"]:
                ml_v = [j["name"], r["id"], r["host"], str(r["rank"])]
                for name, key in (("mccl_member_step_seconds", "step_s"), ("mccl_member_samples_per_second",
                                  "samples_per_s"), ("mccl_member_boundary_seconds", "boundary_s"),
                                  ("mccl_member_lag_seconds", "lag_s"), ("mccl_member_status_age_seconds", "age_s"),
                                  ("mccl_member_wire_sent_bytes_per_second", "wire_sent_Bps"),
                                  ("mccl_member_wire_received_bytes_per_second", "wire_received_Bps")):
                    if r[key] is not None:
                        mg[name].add_metric(ml_v, float(r[key]))
        yield from g.values()
        yield state
        yield changes
        yield stall
        yield from mg.values()

        agents = GaugeMetricFamily("mccl_agents", "Machines by state as the page shows them "
                                   "(training, waiting, idle, ineligible, stopping, error, away)", labels=["state"])
        for st in ("training", "waiting", "idle", "ineligible", "stopping", "error", "away"):
            agents.add_metric([st], s.get("counts", {}).get(st, 0))
        yield agents
        per = GaugeMetricFamily("mccl_agent_state", "1 for each machine's state as the page shows it",
                                labels=["host", "state", "job"])
        for a in s.get("agents", []):
            per.add_metric([a["host"], a["shown"], a["job"] or ""], 1)
        yield per
        age = GaugeMetricFamily("mccl_agent_status_age_seconds", "Age of an agent's last status", labels=["host"])
        for a in s.get("agents", []):
            if a["age_s"] is not None:
                age.add_metric([a["host"]], a["age_s"])
        yield age

        c = s.get("coordinator", {})
        store = s.get("store", {})
        yield GaugeMetricFamily("mccl_fleet_jobs", "Jobs listed in the store", value=len(s.get("jobs", [])))
        yield GaugeMetricFamily("mccl_coordinator_uptime_seconds", "Seconds since `mccl elastic serve` started",
                                value=c.get("uptime_s", 0.0))
        yield CounterMetricFamily("mccl_coordinator_cpu_seconds", "CPU time of the coordinator's process",
                                  value=c.get("cpu_s", 0.0))
        yield GaugeMetricFamily("mccl_coordinator_store_keys", "Keys the store holds", value=store.get("keys", 0))
        yield GaugeMetricFamily("mccl_coordinator_snapshot_seconds", "Time the last read of the store took",
                                value=store.get("read_ms", 0.0) / 1e3)
        yield GaugeMetricFamily("mccl_coordinator_snapshot_age_seconds", "Age of the snapshot this scrape shows",
                                value=c.get("snapshot_age_s", 0.0))
        req = CounterMetricFamily("mccl_coordinator_http_requests", "HTTP requests served, by path",
                                  labels=["path"])
        for path, count in sorted(c.get("requests", {}).items()):
            req.add_metric([path], count)
        yield req
        yield GaugeMetricFamily("mccl_coordinator_store_up", "1 when the last read of the store succeeded",
                                value=0.0 if c.get("store_error") else 1.0)


def render(snap) -> bytes:
    """The text exposition of `snap()`."""
    from prometheus_client import CollectorRegistry, generate_latest
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FleetCollector(snap))
    return generate_latest(reg)
