"""A member's speed, measured, and its gradient weighed by its share.

SpeedEstimate: a moving estimate of this member's compute time per
sample. Each step gives one measurement x (the step's compute seconds /
its samples); the estimate moves toward it by `alpha` (0.3: an
exponential average with a time constant of -1/ln(1 - 0.3) = 2.8 steps),
except that a measurement more than `jump` (1.5) times away from the
estimate, either way, replaces it: a person who starts working on the Mac
is a step change, and the shares follow it at the next exchange instead of
creeping toward it over several steps. A single outlier (a pause) costs at
most two unbalanced steps: it replaces the estimate, and the next normal
step replaces it back.

GradWeights: what makes the job's gradient the mean over all the step's
samples whoever trained them. A member that trained n_i of the step's N
samples (its loss a mean over them) multiplies its gradient by
w_i = world * n_i / N before the all-reduce averages over the world:
sum_i (n_i / N) * grad_i, the gradient of the global batch mean.

- DDP: a comm hook (DistributedDataParallel.register_comm_hook) scales each
  bucket by w / world and all-reduces it (a sum): the same one operation
  per bucket as DDP's own hook, one Python call per bucket. The time of its
  last call is when this member's last gradient was computed: its compute
  time, without the time it then waits for the others. A member whose
  micro-batches differ in size (weights w_1 .. w_m, accumulated under
  no_sync) rescales the gradients accumulated so far by w_{j-1} / w_j
  before micro-batch j, so that the hook's w_m gives sum_j w_j * grad_j.
- Any other module (a plain loop's model, world 1): a hook on every
  parameter scales each gradient as autograd computes it.
FSDP2 (ShardedState): its parameters in the graph are the unsharded copies
FSDP2 makes, so the weighing is done in a custom reduce-scatter
(FSDPModule.set_custom_reduce_scatter) that scales this member's input;
its all-gathers and reduce-scatters are waited for synchronously and
timed (custom all-gather too), and the compute time is the step's time
without them. A group of one makes no reduce-scatter call: its weight is
applied in the all-reduce hook FSDP2 calls after every reduction.
A factor of 0 (a member, or an FSDP2 micro-batch, without samples) gives
zeros, whatever the gradient of an empty batch's loss is.
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref

import torch


class SpeedEstimate:
    def __init__(self, alpha: float = 0.3, jump: float = 1.5):
        if not 0 < alpha <= 1 or jump <= 1:
            raise ValueError(f"mccl.elastic.SpeedEstimate: alpha ({alpha}) must be in (0, 1] and jump ({jump}) "
                             f"above 1")
        self.alpha, self.jump = alpha, jump
        self.value: float | None = None  # seconds per sample
        self.last: float | None = None

    def add(self, seconds: float, samples: int) -> None:
        if samples <= 0 or not seconds > 0 or not math.isfinite(seconds):
            return
        x = seconds / samples
        self.last = x
        v = self.value
        if v is None or x > v * self.jump or x * self.jump < v:
            self.value = x
        else:
            self.value = v + self.alpha * (x - v)

    @property
    def ns(self) -> int:
        """The estimate in integer nanoseconds per sample (0: none yet), as
        it travels in the boundary's int64 all_reduce."""
        return 0 if self.value is None else max(1, round(self.value * 1e9))

    @property
    def time_constant_steps(self) -> float:
        return math.inf if self.alpha >= 1 else -1.0 / math.log(1.0 - self.alpha)


class GradWeights:
    """Weighs one model's gradients by `factor` (module doc). One instance
    follows one model object; attach() again after it changes."""

    def __init__(self):
        self.factor = 1.0
        self.last_grad_t = 0.0
        self.comm_s = 0.0  # FSDP2: seconds in this step's all-gathers and reduce-scatters
        self.scattered = False  # FSDP2: the current reduction went through the weighing reduce-scatter
        self._handles: list = []
        self._model = None  # a weak reference (an id could be reused by the next generation's model)
        self._kind = ""     # "ddp", "fsdp" or "params"
        self._params: list = []
        self._accumulated: float | None = None  # DDP: the weight of the gradients accumulated so far this step

    def attach(self, model: torch.nn.Module) -> bool:
        """Weighs `model`'s gradients (once per model object). True when it is new."""
        if self._model is not None and self._model() is model:
            return False
        self.detach()
        self._model = weakref.ref(model)
        fsdp = [m for m in model.modules() if hasattr(m, "set_requires_gradient_sync")]  # FSDP2's modules
        if fsdp:
            if not all(hasattr(m, "set_custom_reduce_scatter") and hasattr(m, "set_all_reduce_hook") for m in fsdp):
                raise RuntimeError(f"mccl.elastic: shares='speed' with FSDP2 needs FSDPModule."
                                   f"set_custom_reduce_scatter and set_all_reduce_hook, which torch "
                                   f"{torch.__version__} lacks (a newer "
                                   f"torch has it); use shares='equal' with this torch")
            from .speed_fsdp import TimedAllGather, WeighAfterReduce, WeightedReduceScatter
            rs, ag, after = WeightedReduceScatter(self), TimedAllGather(self), WeighAfterReduce(self)
            for m in fsdp:
                m.set_custom_reduce_scatter(rs)
                m.set_custom_all_gather(ag)
                m.set_all_reduce_hook(after)  # weighs where no reduce-scatter runs (a group of one)
            self._kind = "fsdp"  # no reference kept to its modules: the next build frees them
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model.register_comm_hook(model.process_group, self._comm_hook)
            self._params = [p for p in model.parameters() if p.requires_grad]
            self._kind = "ddp"
        else:
            for p in model.parameters():
                if p.requires_grad:
                    self._handles.append(p.register_hook(self._hook))
            self._kind = "params"
        return True

    def detach(self) -> None:
        """Removes the parameter hooks (a DDP wrapper's comm hook goes with the wrapper)."""
        for h in self._handles:
            h.remove()
        self._handles, self._params, self._kind, self._model = [], [], "", None

    @property
    def sharded(self) -> bool:
        return self._kind == "fsdp"

    def new_step(self) -> None:
        self._accumulated = None
        self.last_grad_t = 0.0
        self.comm_s = 0.0

    def _hook(self, grad: torch.Tensor):
        self.last_grad_t = time.perf_counter()
        f = self.factor
        if f == 1.0:
            return None
        return torch.zeros_like(grad) if f == 0.0 else grad * f  # 0: no samples, whatever the gradient

    def _comm_hook(self, group, bucket):
        self.last_grad_t = time.perf_counter()
        buf = bucket.buffer()
        world = group.size() if group is not None else torch.distributed.get_world_size()
        if self.factor == 1.0:
            buf.div_(world)  # what DDP's own hook does
        elif self.factor == 0.0:
            buf.zero_()  # a member without samples this step (the epoch's short last step)
        else:
            buf.mul_(self.factor / world)
        fut = torch.distributed.all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    @contextlib.contextmanager
    def weighing(self, factor: float):
        """One micro-batch's forward and backward, its gradient weighed by `factor`."""
        prev = self._accumulated
        if self._kind == "ddp" and prev is not None and prev != factor:
            if factor == 0:
                raise ValueError("mccl.elastic: an empty micro-batch after one with samples (a member's "
                                 "micro-batches are never empty while it has samples)")
            grads = [p.grad for p in self._params if p.grad is not None]
            if grads and prev == 0:
                torch._foreach_zero_(grads)  # what came before had no samples
            elif grads:
                torch._foreach_mul_(grads, prev / factor)
        self.factor = factor
        try:
            yield
        finally:
            self._accumulated = factor
            self.factor = 1.0
