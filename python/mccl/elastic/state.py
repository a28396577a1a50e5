"""Live state of an elastic job, and its transfer from members to joiners.

State bundles what a member must hand a joiner so that the joiner continues
exactly where the members are: the model's and the optimizer's state dicts,
the data position (ElasticSampler), the step count, the state dicts of
``stateful`` objects (a learning-rate scheduler, a GradScaler: anything with
``state_dict()`` and ``load_state_dict()`` that changes as the job trains)
and any small picklable ``extra``. ``broadcast_state`` sends it from one member to every rank of the
group by MCCL broadcast: the structure (small) by ``broadcast_object_list``,
the tensors as one flat buffer per dtype (one pipelined broadcast each, so
the transfer runs at the links' goodput). ``deliver_state`` is what a job
uses at a change: only the ranks that need the state (joiners, members that
lag) and one that holds it take part, along a chain. Nothing is read from
disk.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .sampler import ElasticSampler


class State:
    sharded = False  # every member holds the whole state (DDP)

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, sampler: ElasticSampler,
                 extra: dict | None = None, stateful: dict | None = None):
        self.model, self.optimizer, self.sampler = model, optimizer, sampler
        self.step = 0  # optimizer steps taken by the job
        self.extra = dict(extra or {})
        self.stateful = checked_stateful(stateful)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optim": self.optimizer.state_dict(),
                "sampler": self.sampler.state_dict(), "step": self.step, "extra": self.extra,
                "stateful": {k: v.state_dict() for k, v in self.stateful.items()}}

    def load_state_dict(self, sd: dict) -> None:
        got = sorted(sd.get("stateful", {}))
        if got != sorted(self.stateful):
            raise ValueError(f"mccl.elastic.State: the sender's stateful objects are {got}, this member's "
                             f"{sorted(self.stateful)}: every member must pass the same names")
        self.model.load_state_dict(sd["model"])
        self.optimizer.load_state_dict(sd["optim"])
        self.sampler.load_state_dict(sd["sampler"])
        self.step = int(sd["step"])
        self.extra = dict(sd["extra"])
        for k, v in self.stateful.items():
            v.load_state_dict(sd["stateful"][k])

    def nbytes(self) -> int:
        """Bytes of tensor data a joiner receives."""
        return tensor_bytes(self.state_dict())


def checked_stateful(stateful: dict | None) -> dict:
    """`stateful` as State keeps it: names to objects with state_dict() and
    load_state_dict(); anything else is refused by name."""
    out = dict(stateful or {})
    for name, obj in out.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"mccl.elastic.State: stateful names must be non-empty strings, got {name!r}")
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
            raise TypeError(f"mccl.elastic.State: stateful[{name!r}] ({type(obj).__name__}) has no "
                            f"state_dict() and load_state_dict()")
    return out


def _mapping(d: dict, values) -> dict:
    # state_dict()s are OrderedDicts that carry a _metadata attribute.
    out = type(d)(values)
    if hasattr(d, "_metadata"):
        out._metadata = d._metadata
    return out


def _split(obj, take):
    """obj with every tensor replaced by ("__mccl_tensor__", index); `take`
    receives the tensors in order."""
    counter = [0]

    def walk(x):
        if isinstance(x, torch.Tensor):
            take(x)
            counter[0] += 1
            return ("__mccl_tensor__", counter[0] - 1)
        if isinstance(x, dict):
            return _mapping(x, ((k, walk(v)) for k, v in x.items()))
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple):
            return tuple(walk(v) for v in x)
        return x

    return walk(obj)


def _join(obj, tensors):
    if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == "__mccl_tensor__":
        return tensors[obj[1]]
    if isinstance(obj, dict):
        return _mapping(obj, ((k, _join(v, tensors)) for k, v in obj.items()))
    if isinstance(obj, list):
        return [_join(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_join(v, tensors) for v in obj)
    return obj


def broadcast_state(state: State, src: int, group=None, load: bool = True) -> int:
    """Makes every rank's `state` equal to rank `src`'s (a rank whose state is
    equal already passes load=False and only relays); returns the bytes of
    tensor data sent."""
    rank = dist.get_rank(group)
    tensors: list[torch.Tensor] = []
    if rank == src:
        skeleton = _split(state.state_dict(), tensors.append)
        specs = [(tuple(t.shape), t.dtype, t.device.type) for t in tensors]
        box = [(skeleton, specs)]
    else:
        box = [None]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, src) if group is not None else src,
                               group=group)
    skeleton, specs = box[0]
    out: list[torch.Tensor | None] = [None] * len(specs)
    sent = 0
    for dtype, idx in _by_dtype(specs).items():
        numels = [int(torch.Size(specs[i][0]).numel()) for i in idx]
        if rank == src:
            flat = _flat(tensors, idx, dtype)
        else:
            flat = torch.empty(sum(numels), dtype=dtype)
        if flat.numel() > 0:
            dist.broadcast(flat, src=dist.get_global_rank(group, src) if group is not None else src,
                           group=group)
        sent += flat.numel() * flat.element_size()
        if rank != src and load:
            # Views of the received buffer: load_state_dict copies them into
            # the model (one copy, not two).
            _place(out, idx, torch.split(flat, numels), specs)
    if rank != src and load:
        state.load_state_dict(_join(skeleton, out))
    return sent


# Pieces of a relayed buffer: small enough that a chain of receivers
# forwards while it receives, large enough that per-message costs vanish.
CHAIN_PIECE_BYTES = 4 << 20


def deliver_state(state: State, holds: bool, group=None) -> int:
    """Gives `state` to the ranks that need it, without the ranks that
    already hold it taking part: every rank says whether its state is the
    job's (`holds`); the lowest rank that holds it sends, and the others that
    do not hold it receive, along one chain in rank order (the sender to the
    first, each receiver forwarding what it got to the next, in pieces, so
    the chain runs at the links' goodput however long it is). Where a
    broadcast moves the state through every member (each of which holds it
    already), this moves it through the receivers only. Returns, on every
    rank, the bytes of tensor data each receiver got (0: nobody needed it)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    flags = torch.zeros(world, dtype=torch.int32)
    flags[rank] = 1 if holds else 0
    dist.all_reduce(flags, group=group)  # who holds it, as every rank sees it
    holders = [r for r in range(world) if flags[r] == 1]
    if not holders:
        raise RuntimeError(f"mccl.elastic: rank {rank} of {world}: no rank holds the job's state to hand over")
    chain = holders[:1] + [r for r in range(world) if flags[r] == 0]
    if len(chain) == 1:
        return 0
    if rank not in chain:
        return tensor_bytes(state.state_dict())
    at = chain.index(rank)
    prev = _global(group, chain[at - 1]) if at > 0 else None
    nxt = _global(group, chain[at + 1]) if at + 1 < len(chain) else None
    tensors: list[torch.Tensor] = []
    if prev is None:
        skeleton = _split(state.state_dict(), tensors.append)
        specs = [(tuple(t.shape), t.dtype, t.device.type) for t in tensors]
        # The sender's piece size, for the whole chain (ranks of other
        # versions must not cut the buffers differently).
        box = [(skeleton, specs, CHAIN_PIECE_BYTES)]
    else:
        box = [None]
        dist.recv_object_list(box, src=prev, group=group)
    skeleton, specs, piece = box[0]
    if nxt is not None:
        dist.send_object_list(box, dst=nxt, group=group)
    out: list[torch.Tensor | None] = [None] * len(specs)
    sent = 0
    for dtype, idx in _by_dtype(specs).items():
        numels = [int(torch.Size(specs[i][0]).numel()) for i in idx]
        if prev is None:
            # The sender's own tensors, as they are (no copy into one buffer).
            parts = [tensors[i].detach().to("cpu").reshape(-1) for i in idx]
        else:
            flat = torch.empty(sum(numels), dtype=dtype)
            parts = list(torch.split(flat, numels))
        _relay(parts, prev, nxt, group, piece)
        sent += sum(numels) * dtype.itemsize
        if prev is not None:
            _place(out, idx, parts, specs)
    if prev is not None:
        state.load_state_dict(_join(skeleton, out))
    return sent


def _place(out: list, idx: list[int], parts, specs) -> None:
    """out[i] for each i in idx: its received 1-D part, shaped and on its device."""
    for i, part in zip(idx, parts):
        shape, _, device = specs[i]
        out[i] = part.view(shape).to(device)


def _global(group, r: int) -> int:
    return dist.get_global_rank(group, r) if group is not None else r


def _relay(parts: list[torch.Tensor], prev: int | None, nxt: int | None, group, piece: int) -> None:
    """One link of the chain: the tensors `parts` (1-D, contiguous) from
    `prev` (None: this rank's own) and on to `nxt` (None: the chain's end),
    each cut into pieces of at most `piece` bytes (the same cuts on every
    rank: they follow from the specs)."""
    pieces = [p for t in parts if t.numel() > 0
              for p in torch.split(t, max(1, int(piece) // t.element_size()))]
    recvs = [dist.irecv(p, src=prev, group=group) for p in pieces] if prev is not None else []
    sends = []
    for i, p in enumerate(pieces):
        if recvs:
            recvs[i].wait()
        if nxt is not None:
            sends.append(dist.isend(p, dst=nxt, group=group))
    for w in sends:
        w.wait()


def tensor_bytes(obj) -> int:
    """Bytes of the tensor data in a nested structure of dicts, lists and tuples."""
    tensors: list[torch.Tensor] = []
    _split(obj, tensors.append)
    return sum(t.numel() * t.element_size() for t in tensors)


def _flat(tensors: list[torch.Tensor], idx: list[int], dtype: torch.dtype) -> torch.Tensor:
    if not idx:
        return torch.empty(0, dtype=dtype)
    return torch.cat([tensors[i].detach().reshape(-1).to("cpu") for i in idx])


def _by_dtype(specs) -> dict:
    out: dict = {}
    for i, (_, dtype, _) in enumerate(specs):
        out.setdefault(dtype, []).append(i)
    return out


def send_tree(obj, dst: int) -> None:
    """Sends a nested structure with tensors to rank `dst` (recv_tree there):
    the structure by send_object_list, the tensors as one buffer per dtype.
    Tensors arrive on the CPU."""
    tensors: list[torch.Tensor] = []
    skeleton = _split(obj, tensors.append)
    specs = [(tuple(t.shape), t.dtype, "cpu") for t in tensors]
    dist.send_object_list([(skeleton, specs)], dst=dst)
    for dtype, idx in _by_dtype(specs).items():
        flat = _flat(tensors, idx, dtype)
        if flat.numel() > 0:
            dist.send(flat, dst=dst)


def recv_tree(src: int):
    box = [None]
    dist.recv_object_list(box, src=src)
    skeleton, specs = box[0]
    out: list[torch.Tensor | None] = [None] * len(specs)
    for dtype, idx in _by_dtype(specs).items():
        numels = [int(torch.Size(specs[i][0]).numel()) for i in idx]
        flat = torch.empty(sum(numels), dtype=dtype)
        if flat.numel() > 0:
            dist.recv(flat, src=src)
        for i, part in zip(idx, torch.split(flat, numels)):
            out[i] = part.view(specs[i][0])
    return _join(skeleton, out)
