"""What a member's model and optimizer look like, so that a joiner that does
not match the job is refused at admission instead of failing the members'
next collective (or, as a founder, imposing its model on the others).

The description is one line per parameter and buffer (name, dtype, shape,
trainable or frozen), the optimizer's class and, per parameter group, the
parameters it holds and its hyperparameter names (not their values: a
schedule changes those, and the joiner receives them with the state), the
sampler's dataset length, batch, seed and shuffle, and the names of the
`stateful` objects. The
signature is a short hash of it; the description itself goes to the store
once per distinct signature, so that a refusal can name the first
difference.
"""

from __future__ import annotations

import hashlib

import torch


def describe(model: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None) -> list[str]:
    lines: list[str] = []
    names: dict[int, str] = {}
    if model is not None:
        for name, p in model.named_parameters():
            names[id(p)] = name
            lines.append(f"parameter {name}: {_dtype(p)} {list(p.shape)} "
                         f"{'trainable' if p.requires_grad else 'frozen'}")
        for name, b in model.named_buffers():
            lines.append(f"buffer {name}: {_dtype(b)} {list(b.shape)}")
    if optimizer is not None:
        lines.append(f"optimizer {type(optimizer).__module__}.{type(optimizer).__qualname__}")
        for i, g in enumerate(optimizer.param_groups):
            held = ", ".join(names.get(id(p), f"<unnamed {list(p.shape)}>") for p in g["params"])
            hyper = ", ".join(sorted(k for k in g if k != "params"))
            lines.append(f"optimizer group {i}: [{held}] ({hyper})")
    return lines


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def signature(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def first_difference(mine: list[str], job: list[str]) -> str:
    """Where a joiner's description (`mine`) departs from the job's."""
    for i, (a, b) in enumerate(zip(mine, job)):
        if a != b:
            return f"line {i + 1}: the joiner has '{a}', the job has '{b}'"
    if len(mine) != len(job):
        longer, what = (mine, "the joiner") if len(mine) > len(job) else (job, "the job")
        return (f"{what} has {abs(len(mine) - len(job))} more line(s), first '{longer[min(len(mine), len(job))]}' "
                f"({len(mine)} lines against the job's {len(job)})")
    return "no difference"


def of_data(state) -> list[str]:
    """The data order's settings (a member with another dataset length, batch,
    seed or shuffle would split the epoch differently: samples seen twice or
    dropped) and the names of the `stateful` objects the state carries."""
    s = getattr(state, "sampler", None)
    lines = []
    if s is not None:
        lines.append(f"sampler {type(s).__name__}: {getattr(s, 'dataset_len', '?')} samples, batch "
                     f"{getattr(s, 'batch', '?')}, seed {getattr(s, 'seed', '?')}, shuffle {getattr(s, 'shuffle', '?')}")
    names = sorted(getattr(state, "stateful", {}) or {})
    if names:
        lines.append(f"stateful {', '.join(names)}")
    return lines


def of_state(state) -> list[str]:
    """The description of an elastic State or ShardedState (whose model is
    built on the meta device for it, when it has none yet), with its data
    order's settings. [] when the model cannot be told (then nothing is
    checked)."""
    if getattr(state, "sharded", False):
        try:
            with torch.device("meta"):
                model = state.build_model()
                optimizer = state.build_optimizer(model.parameters())
            return describe(model, optimizer) + of_data(state)
        except Exception:  # noqa: BLE001 - a model that cannot be built on meta: not checked
            return []
    # A DiLoCoState adds its schedule, wire and outer optimizer (a joiner
    # with another H would meet the members' collectives out of step).
    extra = getattr(state, "signature_lines", None)
    return describe(state.model, state.optimizer) + of_data(state) + (list(extra()) if callable(extra) else [])
