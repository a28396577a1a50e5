"""One member of an elastic DiLoCo job (tests/python/test_diloco.py drives
it through elastic_fleet.Fleet): elastic_worker.py's float64 MLP and data,
SGD with momentum inside, Nesterov SGD outside. Logged for the replay:

    INNER <round> <k> <member id> <epoch:index,...>   each inner step it trains
    OUTER <round> <fragment> <point> <count> <alive ids,...> <round member ids,...>   each application
    ROUND <round> <start> <member ids,...>             each round it starts

Exit codes as elastic_worker.py's."""

import argparse
import sys
import time

import torch

import elastic_worker as w
import mccl.elastic as elastic

INNER_LR, INNER_MOMENTUM = 0.05, 0.5
OUTER_LR, OUTER_MOMENTUM = 0.7, 0.9


def make_state(H: int, fragments: int, overlap, wire: str, merge: str = "rebase"):
    net = w.model()
    inner = torch.optim.SGD(net.parameters(), lr=INNER_LR, momentum=INNER_MOMENTUM)
    outer = torch.optim.SGD(net.parameters(), lr=OUTER_LR, momentum=OUTER_MOMENTUM, nesterov=True)
    return elastic.DiLoCoState(net, inner, outer, elastic.ElasticSampler(w.DATA, batch=w.BATCH, seed=w.SEED),
                               H=H, wire_dtype=wire, fragments=fragments, overlap=overlap, merge=merge)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--job", default="test")
    p.add_argument("--initial", type=int, default=1)
    p.add_argument("--create", action="store_true")
    p.add_argument("--out", default="")
    p.add_argument("--H", type=int, default=5)
    p.add_argument("--fragments", type=int, default=1)
    p.add_argument("--overlap", type=int, default=-1, help="-1: the default")
    p.add_argument("--wire", default="fp32")
    p.add_argument("--merge", default="rebase")
    p.add_argument("--sleep-ms", type=float, default=20.0)
    p.add_argument("--steps", type=int, default=10**9)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--checkpoint-dir", default="", help="the job's checkpoint folder (dormancy, resume)")
    a = p.parse_args()
    torch.set_num_threads(1)
    w.SLEEP_S = a.sleep_ms / 1000
    state = make_state(a.H, a.fragments, None if a.overlap < 0 else a.overlap, a.wire, a.merge)
    job = elastic.Job(a.store, a.job, initial=a.initial, crash_grace_s=3.0, timeout_s=a.timeout_s, create=a.create,
                      checkpoint_dir=a.checkpoint_dir or None)
    job.leave_on_signals()
    seen = {"syncs": 0, "round": None}

    def syncs(st):
        for s in st.syncs[seen["syncs"]:]:
            print(f"OUTER {s['round']} {s['fragment']} {s['point']} {s['count']} {','.join(s['alive'])} "
                  f"{','.join(st.round_members)}", flush=True)
        seen["syncs"] = len(st.syncs)

    def on_step(job, st, loss):
        syncs(st)  # applied before this inner step
        if seen["round"] != st.round_index:
            seen["round"] = st.round_index
            print(f"ROUND {st.round_index} {st.round_start} {','.join(st.round_members)}", flush=True)
        k = st.inner_clock - st.round_start - 1
        if job.id in st.round_members:
            r = st.round_members.index(job.id)
            plan = st.data_plan()
            pairs = ",".join(f"{e}:{i}" for e, i in zip(plan.epoch[k, r].tolist(), plan.idx[k, r].tolist()))
            print(f"INNER {st.round_index} {k} {job.id} {pairs}", flush=True)

    try:
        if job.run(state, w.train_step, steps=a.steps, on_step=on_step) == "left":
            syncs(state)
            print(f"LEFT at step {state.step}", flush=True)
            print("WORKER OK", flush=True)
            return 0
    except elastic.Excluded as e:
        print(f"EXCLUDED {e}", flush=True)
        return 3
    syncs(state)  # the last round's
    import hashlib
    digest = hashlib.sha256(b"".join(g.detach().numpy().tobytes() for g in state.globals)).hexdigest()[:16]
    print(f"DONE step {state.step} wire {state.outer_wire!r} globals {digest}", flush=True)
    for c in job.history:
        print(f"CHANGE gen {c.generation} {c.cause} world {c.world} stall {c.stall_s:.3f} bytes {c.state_bytes}",
              flush=True)
    if job.rank == 0 and a.out:
        torch.save({"globals": [g.detach().clone() for g in state.globals],
                    "model": {k: v.clone() for k, v in state.model.state_dict().items()}}, a.out)
    import torch.distributed as dist
    dist.destroy_process_group()
    print("WORKER OK", flush=True)
    return 0


if __name__ == "__main__":
    t0 = time.time()
    sys.exit(main())
