"""mccl.elastic: training jobs whose members come and go without restarts,
and that outlive every machine.

    import mccl.elastic as elastic
    job = elastic.Job("store-host:29400", job_id="vit", checkpoint_dir="/Volumes/shared/ckpt/vit")
    job.leave_on_signals()
    state = elastic.State(model, optimizer, elastic.ElasticSampler(len(dataset), batch=32))
    job.run(state, train_step, steps=10_000)

The first launch founds the job (Job(..., create=True), or `mccl elastic
create`); every later process joins it, or resumes it from its checkpoint
when every member had left. An FSDP2 model: elastic.ShardedState(build_model,
build_optimizer, sampler, checkpoint_dir=...) in place of State (sharded.py
says how it reshards). Members of unequal speed: Job(..., shares="speed")
gives each a share of the step's samples in proportion to its measured
speed, the gradient weighed by sample count (balance.py; Balancer does the
same in a plain DDP loop), and StragglerPolicy lets one that stays far
behind leave.

See job.py for the loop, records.py and decisions.py for the protocol,
docs/fleet.md for running a studio's fleet. A model the links cannot keep
up with: elastic.DiLoCoState(model, inner_optimizer, outer_optimizer,
sampler, H=...) in place of State (diloco.py: H local steps between outer
syncs, optionally streamed in fragments, on a bf16 or int8 wire).
"""

from .balance import Balancer
from .diloco import DiLoCoState
from .events import (Change, Excluded, JobFinished, JobMissing, JobStopped, Refused, Unreadable)
from .job import Job
from .records import Cause, Generation
from .sampler import ElasticSampler
from .sharded import ShardedState
from .state import State, broadcast_state
from .stragglers import StragglerPolicy

__all__ = ["Balancer", "Cause", "Change", "DiLoCoState", "ElasticSampler", "Excluded", "Generation", "Job", "JobFinished",
           "JobMissing", "JobStopped", "Refused", "ShardedState", "State", "StragglerPolicy", "Unreadable",
           "broadcast_state"]
