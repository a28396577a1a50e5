"""Live state of an elastic FSDP2 job: the slower path, through
torch.distributed.checkpoint's resharding.

A sharded model has no whole copy anywhere, and its shards fit one world
size; when the members change, the state is resharded for the new world:

- a join or a graceful leave (every shard is alive): on the old group the
  full state is gathered to one member that stays
  (``get_*_state_dict(full_state_dict=True, cpu_offload=True)``); on the new
  group every rank builds the model afresh, shards it on the new mesh, and
  the full state goes out from rank 0 tensor by tensor, each rank keeping
  its own shard (``set_*_state_dict(broadcast_from_rank0=True)``). Nothing
  touches a disk.
- a crash (the dead member's shards are gone): the survivors roll back to
  the last checkpoint that ``torch.distributed.checkpoint`` saved, sharded,
  every ``checkpoint_every`` steps into ``checkpoint_dir`` (a folder every
  member can read: the studio's file server), and ``dcp.load`` reshards it
  for the survivors. The data position goes back with it, so the samples of
  the lost steps are trained again and none is dropped or repeated.

    state = elastic.ShardedState(build_model, lambda params: torch.optim.AdamW(params, lr=1e-4),
                                 elastic.ElasticSampler(len(data), batch=8),
                                 checkpoint_dir="/Volumes/shared/ckpt/vit", checkpoint_every=50)
    job.run(state, train_step, steps)   # train_step(model, indices): the FSDP2 model

``build_model()`` returns the unsharded model (on the meta device for a
model that does not fit one member: it is materialised after sharding);
``shard(model, mesh)`` applies ``fully_shard`` (default: the model's direct
children that hold parameters, then the root). The model and optimizer
objects change at every membership change: use the model train_step is
given, and ``state.optimizer``, never a reference kept from before.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from .sampler import ElasticSampler
from .state import recv_tree, send_tree, tensor_bytes


def _fsdp():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.5: FSDP2 was torch.distributed._composable.fsdp
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def shard_children(model: torch.nn.Module, mesh) -> None:
    """The default sharding: each direct child that holds parameters, then the root."""
    fully_shard = _fsdp()
    for child in model.children():
        if any(True for _ in child.parameters()):
            fully_shard(child, mesh=mesh)
    fully_shard(model, mesh=mesh)


class ShardedState:
    sharded = True

    def __init__(self, build_model, build_optimizer, sampler: ElasticSampler, *, shard=None,
                 checkpoint_dir: str | None = None, checkpoint_every: int = 50, keep: int = 2,
                 device: str | torch.device = "cpu", extra: dict | None = None):
        if checkpoint_every < 1 or keep < 1:
            raise ValueError("mccl.elastic.ShardedState: checkpoint_every and keep must be at least 1")
        self.build_model, self.build_optimizer = build_model, build_optimizer
        self.shard = shard or shard_children
        self.sampler = sampler
        self.checkpoint_dir, self.checkpoint_every, self.keep = checkpoint_dir, checkpoint_every, keep
        self.device = torch.device(device)
        self.extra = dict(extra or {})
        self.step = 0
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.checkpoint_step: int | None = None  # the step of the last checkpoint this member saw saved
        self.checkpoint_name = ""                # and its folder's name
        self._builds = 0

    # ---- what does not shard ------------------------------------------------
    def _meta(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "step": self.step, "extra": self.extra}

    def _load_meta(self, m: dict) -> None:
        self.sampler.load_state_dict(m["sampler"])
        self.step = int(m["step"])
        self.extra = dict(m["extra"])

    # ---- building on the current group ---------------------------------------
    def _build(self) -> None:
        """A fresh model sharded on the current group's mesh, and its optimizer."""
        from torch.distributed.device_mesh import init_device_mesh
        self.model = self.optimizer = None  # the old ones hold the old group's mesh
        model = self.build_model()
        # DeviceMesh equality ignores the process group and this rank's place
        # in it, and DTensor caches sharding by mesh: a new generation with the
        # world size of an old one, where this process had another rank, would
        # be handed the old shard layout. A name per build keeps them apart.
        self._builds += 1
        mesh = init_device_mesh(self.device.type, (dist.get_world_size(),),
                                mesh_dim_names=(f"mccl_elastic_{self._builds}",))
        self.shard(model, mesh)
        if any(p.is_meta for p in model.parameters()):
            model.to_empty(device=self.device)
        self.model = model
        self.optimizer = self.build_optimizer(model.parameters())

    @staticmethod
    def _options(**kw):
        from torch.distributed.checkpoint.state_dict import StateDictOptions
        return StateDictOptions(**kw)

    def initial(self) -> dict:
        """Rank 0's start: a model as build_model makes it (no optimizer state)."""
        model = self.build_model()
        if any(p.is_meta for p in model.parameters()):
            raise ValueError("mccl.elastic.ShardedState: the first member builds the initial parameters, so "
                             "build_model must not return a meta-device model at the job's start")
        return {"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "optim": None,
                "meta": self._meta()}

    def gather(self, dst: int) -> dict | None:
        """Collective on the current group: the full state, on rank `dst` only."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
        opts = self._options(full_state_dict=True, cpu_offload=True)
        msd = get_model_state_dict(self.model, options=opts)
        osd = get_optimizer_state_dict(self.model, self.optimizer, options=opts)
        full = {"model": msd, "optim": osd, "meta": self._meta()} if dist.get_rank() == 0 else None
        if dst == 0:
            return full
        if dist.get_rank() == 0:
            send_tree(full, dst)
        elif dist.get_rank() == dst:
            return recv_tree(0)
        return None

    def rebuild(self, full: dict | None) -> int:
        """Collective on the (new) current group: rank 0 holds `full`, every
        rank ends with its shard of it. Returns the bytes of the full state."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict
        rank = dist.get_rank()
        if rank == 0 and full is None:
            raise RuntimeError("mccl.elastic.ShardedState: rank 0 of the new group holds no state to send")
        if rank == 0:
            optim = full["optim"]
            # An optimizer without tensor state (SGD without momentum) keeps
            # only its hyperparameters, which go with the small things.
            groups = [{k: v for k, v in g.items() if k != "params"} for g in optim["param_groups"]] \
                if optim is not None else None
            box = [(full["meta"], groups, optim is not None and tensor_bytes(optim["state"]) > 0,
                    tensor_bytes(full), self.checkpoint_step)]
        else:
            box = [None]
        dist.broadcast_object_list(box, src=0)
        meta, groups, optim_tensors, nbytes, self.checkpoint_step = box[0]
        self._build()
        opts = self._options(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(self.model, full["model"] if rank == 0 else {}, options=opts)
        if optim_tensors:
            set_optimizer_state_dict(self.model, self.optimizer, full["optim"] if rank == 0 else {},
                                     options=opts)
        if groups is not None:
            if len(groups) != len(self.optimizer.param_groups):
                raise RuntimeError(f"mccl.elastic.ShardedState: the state has {len(groups)} parameter groups, "
                                   f"build_optimizer made {len(self.optimizer.param_groups)}")
            for g, hyper in zip(self.optimizer.param_groups, groups):
                g.update(hyper)
        self._load_meta(meta)
        return nbytes

    # ---- checkpoints (what a crash rolls back to) ----------------------------
    def checkpoint_due(self) -> bool:
        return self.checkpoint_dir is not None and self.step % self.checkpoint_every == 0 and \
            self.checkpoint_step != self.step

    def save(self, meta: dict | None = None) -> str:
        """Collective: a sharded checkpoint of this step in a folder of its
        own; every rank syncs and hashes its files, then rank 0 writes the
        manifest, the pointer to it, and removes older ones
        (sharded_files.py). `meta`: the job's notes on it (its generation,
        the model's signature), kept beside the step. Returns the folder's
        name."""
        import uuid

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from . import sharded_files as files
        rank = dist.get_rank()
        names = [files.folder_name(self.step, uuid.uuid4().hex[:8]) if rank == 0 else None]
        dist.broadcast_object_list(names, src=0)
        path = os.path.join(self.checkpoint_dir, names[0])
        msd, osd = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
        if rank == 0:
            torch.save(dict(meta or {}, **self._meta()), os.path.join(path, files.META))
        mine = files.sync_and_hash(path, files.own_files(path, rank))
        every: list = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        if rank == 0:
            listed = {k: v for part in every for k, v in part.items()}
            files.write_manifest(self.checkpoint_dir, path, self.step, listed)
            files.prune(self.checkpoint_dir, self.keep, names[0])
        self.checkpoint_step, self.checkpoint_name = self.step, names[0]
        return names[0]

    def restore(self) -> int:
        """Collective on the (new) current group: the newest valid checkpoint
        (rank 0 verifies it against its manifest and names it to the
        others; a torn or damaged one is skipped for the one before it),
        resharded for this group. Returns the steps rolled back."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from . import sharded_files as files
        if self.checkpoint_dir is None:
            raise RuntimeError("mccl.elastic.ShardedState: a member's shards were lost and there is no "
                               "checkpoint to roll back to (set checkpoint_dir to a folder every member "
                               "can read)")
        name = [files.newest_valid(self.checkpoint_dir) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(name, src=0)
        if name[0] is None:
            raise RuntimeError(f"mccl.elastic.ShardedState: no valid checkpoint in {self.checkpoint_dir}")
        path = os.path.join(self.checkpoint_dir, name[0])
        before = self.step
        self._build()
        msd, osd = get_state_dict(self.model, self.optimizer)
        sd = {"model": msd, "optim": osd}
        dcp.load(sd, checkpoint_id=path)
        set_state_dict(self.model, self.optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        self._load_meta(torch.load(os.path.join(path, files.META), weights_only=False))
        self.checkpoint_name = name[0]
        self.checkpoint_step = self.step
        return before - self.step
