"""The anchor for `mccl-bench elastic --anchor`: torchrun's elastic mode on
the same lab, the way a user would run it without mccl.elastic.

Each lab host runs a torchrun agent (``--nnodes MIN:MAX``, c10d rendezvous on
host 0, ``--monitor-interval 0.5``) whose worker trains the same model and
emulated step as the mccl.elastic members, over Gloo, saving a checkpoint
every 10 steps (what torchrun's restart resumes from). One host's agent and
worker are killed; measured: from the kill to the survivors' next completed
step, and the steps lost (done since the last checkpoint, redone).

    python -m mccl.bench.elastic_anchor --ckpt DIR --params-mb 64 --step-ms 300   (the worker)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def worker(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--params-mb", type=float, default=64.0)
    p.add_argument("--step-ms", type=float, default=300.0)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--steps", type=int, default=10_000)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    # torchrun's c10d rendezvous hands every round's workers the same store
    # (TORCHELASTIC_USE_AGENT_STORE), and Gloo's keys of a round that died are
    # still in it: restarted workers dial dead addresses. A prefix per round
    # keeps rounds apart. Restart counts differ between agents (a host that
    # comes back starts at 0), so the round is counted in the store: every
    # worker of a round of W workers arrives once, so arrival k at world W
    # belongs to round (k - 1) // W of that size.
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        import datetime
        world = int(os.environ["WORLD_SIZE"])
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=300))
        k = store.add(f"mccl-anchor/arrivals/{world}", 1)
        store = dist.PrefixStore(f"mccl-anchor/{world}/{(k - 1) // world}", store)
        dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]), world_size=world)
    else:
        dist.init_process_group("gloo")
    width = 1024
    layers = max(1, round(a.params_mb * 2**20 / 4 / (width * width)))
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    opt = torch.optim.SGD(net.parameters(), lr=1e-4, momentum=0.9)
    step = 0
    path = os.path.join(a.ckpt, "ckpt.pt")
    if os.path.exists(path):
        ck = torch.load(path)
        net.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optim"])
        step = ck["step"]
        print(json.dumps({"ev": "resumed", "step": step, "t": time.time(),
                          "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))}), flush=True)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    x = torch.randn(1, width)
    while step < a.steps:
        time.sleep(a.step_ms / 1000)
        ddp(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        print(json.dumps({"ev": "commit", "step": step - 1, "world": dist.get_world_size(), "t": time.time()}),
              flush=True)
        if step % a.every == 0 and dist.get_rank() == 0:
            tmp = path + ".tmp"
            torch.save({"model": net.state_dict(), "optim": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, path)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(worker())
