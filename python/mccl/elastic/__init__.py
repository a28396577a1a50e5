"""mccl.elastic: training jobs whose members come and go without restarts.

    import mccl.elastic as elastic
    job = elastic.Job("store-host:29400", job_id="vit")
    job.leave_on_signals()
    state = elastic.State(model, optimizer, elastic.ElasticSampler(len(dataset), batch=32))
    job.run(state, train_step, steps=10_000)

An FSDP2 model: elastic.ShardedState(build_model, build_optimizer, sampler,
checkpoint_dir=...) in place of State (sharded.py says how it reshards).

See job.py for the protocol, docs/fleet.md for running a studio's fleet.
"""

from .job import Change, Excluded, Job
from .sampler import ElasticSampler
from .sharded import ShardedState
from .state import State, broadcast_state

__all__ = ["Change", "ElasticSampler", "Excluded", "Job", "ShardedState", "State", "broadcast_state"]
