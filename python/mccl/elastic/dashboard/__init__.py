"""The fleet's status page: what the coordinator (`mccl elastic serve`)
shows about every job and machine that meets at its store.

Layers, each its own file:
    keys.py       the status keys in the store and the limits on their values
    publish.py    the writers: a member's status (Job._publish_status) and the agent's (AgentPublisher)
    reader.py     the coordinator's reads of the store (a few round trips per snapshot)
    snapshot.py   the store's keys -> one dict of jobs, members, changes and machines
    series.py     the night's samples per job (a bounded ring)
    metrics.py    the dict -> Prometheus text (prometheus_client, the `serve` extra)
    auth.py       the operator's token
    server.py     HTTP: the page (assets/), /api/fleet, /metrics
    report.py     `mccl elastic status --fleet` / `--http URL`: the fleet as text

docs/status-page.md describes the page, the JSON and the metrics. Nothing
is imported here: a member's watcher thread imports keys and publish only,
not the server.
"""
