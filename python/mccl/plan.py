"""mccl plan: what a fleet of N machines would do for a data-parallel job.

Inputs are measurements, not guesses:

- the job's step time on one machine (compute only) and the share of the
  gradient all-reduce that DDP hid behind backward, from
  ``mccl-bench scaling --json`` (or --step-ms / --hidden / --params);
- the network: per-link TCP goodput and per-message latency, from a tune
  file (``mccl-bench --tune``) or --link-gbit / --alpha-us;
- the machine's matrix-product throughput against a datacentre GPU, from two
  ``mccl-bench matmul --json`` files (or --tflops-ratio), and a price per
  GPU-hour, for the cloud-cost comparison.

Model, per step on N machines (all-reduce of the fp32 gradients, G bytes, by
the algorithm MCCL's cost model chooses; for large buffers the ring, or the
two-dimensional torus on large fleets where the ring's 2(N-1) steps add up):

    comm(N)    = 2(N-1) * (alpha + max(2o, G/N * beta))       (the ring)
               = 2(b-1) * (alpha + max(2o, G/b * beta))
                 + 2(a-1) * (alpha + max(2o, G/N * beta)) + tail (the torus, N = a x b)

A buffer of at least two MCCL_PIECE_BYTES (4 MiB by default) runs as pieces,
each with the algorithm chosen for its size, MCCL_INFLIGHT_OPS (2) of them on
the wire at once: max(busy(pieces) + alpha(piece), sum(pieces) / lanes), busy
being a piece's time less its network latency (alpha per step).
With --bucket-mb, comm(N) is the buckets' all-reduces one after another.
    exposed(N) = (1 - hidden) * comm(N)
    step(N)    = compute + exposed(N)
    samples/s  = N * batch / step(N);  efficiency = compute / step(N)

Every assumption is printed with the result; --json for tools.

``mccl plan --validate SCALING_JSON`` checks a finer model against measured
runs: it predicts each multi-rank step from the one-rank step, the DDP
bucket size and the network, with buckets readied evenly through backward
and all-reduced one after another (``bucket_exposed``), and prints the error.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field

from . import _C

# The network defaults are the cost model's built-in values (one source:
# csrc/core/comm/cost_model.h); a tune file or --alpha-us & co. replace them.
_NET = _C.cost_model_defaults()


@dataclass
class Inputs:
    params: int                  # model parameters (gradients are fp32: 4 bytes each)
    batch: int                   # samples per machine per step
    compute_s: float             # step time on one machine, no communication
    hidden: float                # share of the all-reduce hidden behind backward (0..1)
    alpha_us: float = _NET["alpha_us"]          # per-message latency
    overhead_us: float = _NET["overhead_us"]    # per-message CPU work
    beta_ns_per_byte: float = _NET["beta_ns_per_byte"]  # per byte on a link (10 GbE ~ 0.8)
    local_tflops: float | None = None
    ref_tflops: float | None = None
    ref_name: str = "A100"
    price_per_gpu_hour: float | None = None
    hours_per_night: float = 12.0
    bucket_mb: float | None = None   # set: exposed comm from the bucket model, not `hidden`
    layers: int | None = None        # layers readying gradients one after another (bucket model)
    backward_share: float = 2 / 3    # share of the step spent in backward (bucket model)
    sources: dict = field(default_factory=dict)  # where each input came from


def ring_seconds(nbytes: float, n: int, alpha_us: float, overhead_us: float, beta_ns_per_byte: float) -> float:
    """The plan's ring all-reduce of `nbytes` on n machines."""
    if n <= 1:
        return 0.0
    a, o, b = alpha_us * 1e-6, overhead_us * 1e-6, beta_ns_per_byte * 1e-9
    return 2 * (n - 1) * (a + max(2 * o, nbytes / n * b))


def allreduce_seconds(nbytes: float, n: int, alpha_us: float, overhead_us: float,
                      beta_ns_per_byte: float) -> tuple[float, str]:
    """MCCL's all-reduce of `nbytes` of float32 on n machines: the seconds its
    cost model predicts for the algorithm it chooses there, and what runs
    ("torus", or "torus in 6 pieces" where MCCL_PIECE_BYTES cuts the buffer,
    as mccl-bench records it). No reduction term (as ring_seconds, which it
    equals where the ring runs the buffer whole), so for small buffers the
    choice can differ from the library's, which also weighs the reductions;
    this process's MCCL_ALGO, MCCL_SMALL_BYTES, MCCL_PIECE_BYTES and
    MCCL_INFLIGHT_OPS apply.

    Pieces: each is priced for the algorithm chosen for its size; up to
    MCCL_INFLIGHT_OPS of them are on the wire at once, so the whole takes
    the longer of the pieces' busy time (wire and per-message CPU) plus the
    longest piece's network latency (links kept busy: what the ring's pieces
    measured on the lab, within 0.1 % of one buffer) and the pieces'
    predicted times shared among the lanes (pieces whose network latency
    dominates; not measured)."""
    if n <= 1 or nbytes <= 0:
        return 0.0, "none"
    parts = pieces(max(1, int(nbytes)))
    model = _network(alpha_us, overhead_us, beta_ns_per_byte)
    names = {size: _C.chosen_algorithm("allreduce", size, n, model).split(" ")[0] for size in set(parts)}
    return pieces_seconds(parts, [names[p] for p in parts], n, model)


def pieces_seconds(parts: list[int], names: list[str], n: int, model: dict,
                   lanes: int | None = None) -> tuple[float, str]:
    """An all-reduce run as `parts` (bytes; one part: the whole buffer), part
    i by algorithm names[i] (one algorithm for all but the last, as MCCL
    cuts them), on n ranks under the cost model `model`, `lanes` of them on
    the wire at once (default: this process's MCCL_INFLIGHT_OPS): its
    predicted seconds and its name as mccl-bench records it ("ring", "torus
    in 6 pieces", "torus in 6 pieces and recursive_multiplying for the
    last"). Pieces: see allreduce_seconds."""
    if not parts or len(names) != len(parts) or len(set(names[:-1])) > 1:
        raise ValueError(f"pieces_seconds: {len(parts)} pieces named {names}: expected one algorithm "
                         f"for every piece but the last")
    # A piece's network latency (alpha per step): what another piece on the
    # wire can hide. Its wire time and its CPU time per message, which the
    # model lets overlap each other (max(2o, bytes x beta) per step), use
    # the links and cores that the other pieces need too.
    latency_only = dict(model, beta_ns_per_byte=0.0, overhead_us=0.0)
    priced = {}
    for key in set(zip(parts, names)):
        size, name = key
        priced[key] = (_C.predict_seconds("allreduce", name, size, n, model),
                       _C.predict_seconds("allreduce", name, size, n, latency_only))
    keys = list(zip(parts, names))
    if len(keys) == 1:
        return priced[keys[0]][0], names[0]
    if lanes is None:
        _, lanes = _C.piece_settings()
    total = sum(priced[k][0] for k in keys)
    busy = sum(priced[k][0] - priced[k][1] for k in keys)
    latency = max(priced[k][1] for k in keys)
    seconds = max(busy + latency, total / min(lanes, len(keys)))
    first, last = names[0], names[-1]
    if first == last:
        return seconds, f"{first} in {len(parts)} pieces"
    return seconds, f"{first} in {len(parts) - 1} pieces and {last} for the last"


def pieces(nbytes: int, element_size: int = 4, piece_bytes: int | None = None) -> list[int]:
    """The pieces (bytes) MCCL's torch backend cuts an all_reduce of `nbytes`
    (elements of `element_size` bytes; float32 by default) into: whole groups
    of 256 elements of MCCL_PIECE_BYTES (this process's, or `piece_bytes`)
    each, the rest in the last, once the buffer holds at least two pieces'
    worth (the backend's own rule: ProcessGroupMCCL::pieceElementsFor); else
    one."""
    per = element_size * _C.piece_elements(nbytes, element_size, piece_bytes)
    if per == 0:
        return [nbytes]
    k = -(-nbytes // per)
    return [per] * (k - 1) + [nbytes - (k - 1) * per]


def _network(alpha_us: float, overhead_us: float, beta_ns_per_byte: float) -> dict:
    """The C++ cost model's inputs for the plan's terms (no reduction term)."""
    return {"alpha_us": alpha_us, "overhead_us": overhead_us, "beta_ns_per_byte": beta_ns_per_byte,
            "gamma_ns_per_byte": 0.0}


def _allreduce(inp: Inputs, nbytes: float, n: int) -> tuple[float, str]:
    return allreduce_seconds(nbytes, n, inp.alpha_us, inp.overhead_us, inp.beta_ns_per_byte)


def comm_seconds(inp: Inputs, n: int) -> float:
    return _allreduce(inp, 4.0 * inp.params, n)[0]


def _bucket_count(inp: Inputs, bucket_bytes: float) -> int:
    return max(1, math.ceil(4.0 * inp.params / bucket_bytes))


def project(inp: Inputs, n: int) -> dict:
    if inp.bucket_mb:
        # The buckets' all-reduces, one after another.
        bucket = inp.bucket_mb * 2**20
        k = _bucket_count(inp, bucket)
        per_bucket, algorithm = _allreduce(inp, 4.0 * inp.params / k, n)
        comm = k * per_bucket
        exposed = bucket_exposed(inp, n, bucket, inp.backward_share, inp.layers)
    else:
        comm, algorithm = _allreduce(inp, 4.0 * inp.params, n)
        exposed = (1.0 - max(0.0, min(1.0, inp.hidden))) * comm
    step = inp.compute_s + exposed
    row = {"nodes": n, "step_s": step, "comm_s": comm, "exposed_s": exposed, "algorithm": algorithm,
           "samples_per_s": n * inp.batch / step, "efficiency": inp.compute_s / step}
    if inp.local_tflops and inp.ref_tflops:
        ratio = inp.local_tflops / inp.ref_tflops
        row["ref_gpu_equivalents"] = n * ratio * row["efficiency"]
        if inp.price_per_gpu_hour is not None:
            row["yearly_offset_usd"] = (row["ref_gpu_equivalents"] * inp.price_per_gpu_hour
                                        * inp.hours_per_night * 365)
    return row


def bucket_exposed(inp: Inputs, n: int, bucket_bytes: float, backward_share: float = 2 / 3,
                   layers: int | None = None) -> float:
    """Communication left after backward when DDP all-reduces its buckets as
    backward produces them (a prediction; `hidden` is not used).

    The gradients split into k equal buckets; backward is the last
    ``backward_share`` of the one-machine step. With ``layers`` equal layers,
    backward finishes layer j (from the last) at forward + backward * j /
    layers and the gradients of the layers done so far are ready, so a bucket
    is ready when the layer holding its last byte is done; without, gradients
    become ready evenly. Each bucket's all-reduce (allreduce_seconds) starts
    when it is ready and the previous one is done."""
    if n <= 1:
        return 0.0
    grad = 4.0 * inp.params
    k = _bucket_count(inp, bucket_bytes)
    per_bucket = _allreduce(inp, grad / k, n)[0]
    backward = backward_share * inp.compute_s
    forward = inp.compute_s - backward
    finish = 0.0
    for i in range(k):
        done = (i + 1) / k if not layers else math.ceil((i + 1) * layers / k - 1e-9) / layers
        finish = max(finish, forward + backward * done) + per_bucket
    return max(0.0, finish - inp.compute_s)


def validate(scaling: dict, alpha_us: float, overhead_us: float, beta_ns_per_byte: float,
             backward_share: float = 2 / 3, layers: int | None = None) -> list[dict]:
    """Predicted against measured step time for every multi-rank run of a
    ``mccl-bench scaling --json`` result, from its one-rank step time, its DDP
    bucket size, the model's layers (the ViT preset's depth unless given) and
    the network's alpha/beta (no measured hidden share)."""
    if scaling.get("fsdp"):
        raise ValueError("--validate models DDP's bucketed all-reduce; this scaling run used FSDP2")
    if layers is None and scaling.get("preset"):
        from .workloads.vit import PRESETS
        layers = PRESETS[scaling["preset"]][1] if scaling["preset"] in PRESETS else None
    one = next(r for r in scaling["runs"] if r["world"] == 1)
    inp = Inputs(params=one["params"], batch=one["batch_per_rank"], compute_s=one["step_s"], hidden=0.0,
                 alpha_us=alpha_us, overhead_us=overhead_us, beta_ns_per_byte=beta_ns_per_byte)
    rows = []
    for r in scaling["runs"]:
        if r["world"] <= 1:
            continue
        bucket = (r.get("bucket_mb") or scaling.get("bucket_mb") or 25.0) * 2**20
        predicted = inp.compute_s + bucket_exposed(inp, r["world"], bucket, backward_share, layers)
        rows.append({"backend": r["backend"], "world": r["world"], "measured_s": r["step_s"],
                     "predicted_s": predicted, "error": predicted / r["step_s"] - 1,
                     "comm_s": comm_seconds(inp, r["world"]), "layers": layers})
    return rows


def validate_collectives(runs: dict[str, dict], alpha_us: float, overhead_us: float,
                         beta_ns_per_byte: float | None, min_bytes: int = 1 << 20,
                         backend: str = "mccl") -> list[dict]:
    """The plan's all-reduce term (what every step's communication is made
    of) against measured all_reduce times: every all_reduce row of at least
    `min_bytes` in each ``mccl-bench --json`` file of `runs` (name -> its
    JSON), priced for the algorithm the row records MCCL ran (files from
    before mccl-bench recorded it: the one their MCCL_ALGO forced, else the
    ring), its pieces as allreduce_seconds prices them (recorded_pieces,
    under the run's own piece settings). The links' rate is the file's measured
    goodput where it has one, else `beta_ns_per_byte`."""
    rows = []
    for name, run in runs.items():
        for r in run.get("results", []):
            if r.get("op") != "all_reduce" or r["bytes"] < min_bytes or backend not in r:
                continue
            goodput = r.get("goodput_GBps")
            beta = 1.0 / goodput if goodput else beta_ns_per_byte
            if beta is None:
                raise ValueError(f"{name} has no measured goodput: give the links' rate")
            meta = run.get("meta", {})
            if not (r.get("world") or meta.get("world")):
                raise ValueError(f"{name}: an all_reduce row without a world size")
            n = int(r.get("world") or meta["world"])
            measured = r[backend]["time_us"] * 1e-6
            recorded = str(r[backend].get("algorithm") or _forced_allreduce(meta) or "ring")
            # The wire algorithms ("ring_wire (bf16)", "pairwise_int8"; before
            # they had names, "bf16 wire, ring"): the model prices their bytes
            # but not their conversions, so they do not validate it.
            if "wire" in recorded or "int8" in recorded:
                continue
            parts, names, lanes = recorded_pieces(recorded, r["bytes"], meta, name)
            predicted, _ = pieces_seconds(parts, names, n, _network(alpha_us, overhead_us, beta), lanes)
            algorithm = recorded.split(" ")[0] if len(parts) == 1 else recorded
            rows.append({"file": name, "world": n, "bytes": r["bytes"], "algorithm": algorithm, "measured_s": measured,
                         "predicted_s": predicted, "error": predicted / measured - 1,
                         "goodput_GBps": 1.0 / beta, "goodput_measured": bool(goodput)})
    if not rows:
        raise ValueError(f"no {backend} all_reduce of at least {min_bytes} bytes in {', '.join(runs)}")
    return sorted(rows, key=lambda x: (x["world"], x["bytes"]))


# How a run's MCCL cut its all-reduces; a file records them in meta.env when set.
_PIECE_SETTINGS = ("MCCL_PIECE_BYTES", "MCCL_INFLIGHT_OPS")
_PIECES = re.compile(r"(?P<first>.+?) in (?P<count>[1-9][0-9]*) pieces(?: and (?P<last>.+) for the last)?")
_ELEMENT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
                  "int16": 2, "int8": 1, "uint8": 1}


def _forced_allreduce(meta: dict) -> str | None:
    """The all-reduce algorithm a run's MCCL_ALGO forced (meta.env), if any."""
    for item in str(meta.get("env", {}).get("MCCL_ALGO", "")).split(","):
        op, _, name = item.strip().partition("=")
        if op.strip() == "allreduce" and name.strip():
            return name.strip()
    return None


def recorded_pieces(recorded: str, nbytes: int, meta: dict, where: str) -> tuple[list[int], list[str], int]:
    """The pieces (bytes), their algorithms and the lanes (pieces on the wire
    at once) of an all-reduce of `nbytes` that mccl-bench recorded as
    `recorded` ("torus", "bruck (radix 3)", "ring in 16 pieces", "torus in 15
    pieces and ring for the last"), cut as the run cut it: under the
    MCCL_PIECE_BYTES and MCCL_INFLIGHT_OPS of its meta.env (absent: the
    defaults) and its dtype. A label that names pieces the run's settings do
    not give is an error, as is one that cannot be read."""
    env = meta.get("env", {})
    settings = {k: str(env[k]) for k in _PIECE_SETTINGS if k in env}
    try:
        piece_bytes, lanes = _C.piece_settings(settings)
    except Exception as e:  # a malformed recorded setting
        raise ValueError(f"{where}: {e}") from None
    m = _PIECES.fullmatch(recorded)
    if m is None:
        if " pieces" in recorded:
            raise ValueError(f"{where}: cannot read the recorded algorithm {recorded!r}")
        return [nbytes], [recorded.split(" ")[0]], lanes
    k = int(m["count"])
    names = [m["first"].split(" ")[0]] * k + ([m["last"].split(" ")[0]] if m["last"] else [])
    dtype = meta.get("dtype", "float32")
    if dtype not in _ELEMENT_BYTES:
        raise ValueError(f"{where}: unknown dtype {dtype!r} of a run in pieces")
    parts = pieces(nbytes, _ELEMENT_BYTES[dtype], piece_bytes)
    if len(parts) != len(names):
        raise ValueError(f"{where}: {recorded!r} is {len(names)} pieces, but the run's MCCL_PIECE_BYTES "
                         f"({piece_bytes}) cuts {nbytes} bytes of {dtype} into {len(parts)}")
    return parts, names, lanes


def render_collective_validation(rows: list[dict]) -> str:
    w = max([10] + [len(r.get("algorithm", "ring")) for r in rows])
    lines = [f"{'N':>3} {'size':>8} {'algorithm':>{w}} {'measured (ms)':>14} {'predicted (ms)':>15} {'error':>7}  goodput"]
    for r in rows:
        size = f"{r['bytes'] / 2**20:g} MiB"
        lines.append(f"{r['world']:>3} {size:>8} {r.get('algorithm', 'ring'):>{w}} {r['measured_s'] * 1000:>14.1f} {r['predicted_s'] * 1000:>15.1f} "
                     f"{100 * r['error']:>+6.1f}%  {r['goodput_GBps']:.4f} GB/s "
                     f"({'measured' if r['goodput_measured'] else 'given'}; {r['file']})")
    return "\n".join(lines)


def render_validation(rows: list[dict]) -> str:
    lines = [f"{'backend':>8} {'N':>3} {'measured (ms)':>14} {'predicted (ms)':>15} {'error':>7}"]
    for r in rows:
        lines.append(f"{r['backend']:>8} {r['world']:>3} {r['measured_s'] * 1000:>14.1f} "
                     f"{r['predicted_s'] * 1000:>15.1f} {100 * r['error']:>+6.1f}%")
    return "\n".join(lines)


def plan(inp: Inputs, nodes: list[int]) -> dict:
    piece, lanes = _C.piece_settings()
    return {"inputs": asdict(inp), "pieces": {"piece_bytes": piece, "inflight_ops": lanes},
            "rows": [project(inp, n) for n in nodes]}


def render(result: dict) -> str:
    i = result["inputs"]
    lines = ["mccl plan: data-parallel training on N machines", "", "Assumptions:"]
    lines.append(f"  model: {i['params']:,} parameters, fp32 gradients ({4 * i['params'] / 2**20:.0f} MiB "
                 f"all-reduced per step by the algorithm MCCL's cost model chooses: column 'all-reduce')")
    lines.append(f"  one machine: {i['compute_s'] * 1000:.1f} ms per step of {i['batch']} samples "
                 f"({i['batch'] / i['compute_s']:.1f} samples/s)")
    if i.get("bucket_mb"):
        lines.append(f"  overlap: DDP buckets of {i['bucket_mb']:g} MB all-reduced one after another as backward "
                     f"({100 * i['backward_share']:.0f} % of the step) readies them"
                     + (f", layer by layer ({i['layers']} layers)" if i.get("layers") else ", evenly")
                     + " (the model mccl plan --validate checks)")
    else:
        lines.append(f"  share of the all-reduce hidden behind backward: {100 * i['hidden']:.0f} %")
    lines.append(f"  network: alpha {i['alpha_us']:.1f} us, o {i['overhead_us']:.1f} us per message, "
                 f"{1 / i['beta_ns_per_byte']:.3f} GB/s per link ({8 / i['beta_ns_per_byte']:.2f} Gbit/s of "
                 f"TCP goodput), switched (every link at full rate at once)")
    if i["local_tflops"] and i["ref_tflops"]:
        lines.append(f"  compute: {i['local_tflops']:.2f} TFLOP/s here vs {i['ref_tflops']:.2f} on an "
                     f"{i['ref_name']} (ratio {i['local_tflops'] / i['ref_tflops']:.3f})")
    if i["price_per_gpu_hour"] is not None:
        lines.append(f"  cloud price: ${i['price_per_gpu_hour']:.2f} per {i['ref_name']}-hour; the fleet "
                     f"works {i['hours_per_night']:g} h a night, 365 nights a year")
    for k, v in i.get("sources", {}).items():
        lines.append(f"  source of {k}: {v}")
    if "pieces" in result:
        p = result["pieces"]
        lines.append("  pieces: " + (f"an all-reduce of {2 * p['piece_bytes'] / 2**20:g} MiB or more runs as "
                                     f"{p['piece_bytes'] / 2**20:g} MiB pieces, {p['inflight_ops']} on the wire "
                                     f"at once (MCCL_PIECE_BYTES, MCCL_INFLIGHT_OPS)"
                                     if p["piece_bytes"] > 0 else "none (MCCL_PIECE_BYTES=0): whole buffers"))
    lines.append("  not modelled: stragglers, contention with other traffic, optimizer time growing with N")
    w = max([12] + [len(r["algorithm"]) for r in result["rows"]])
    head = (f"{'nodes':>6} {'all-reduce':>{w}} {'step (ms)':>10} {'comm (ms)':>10} {'exposed':>9} {'samples/s':>11} "
            f"{'efficiency':>11}")
    extra = "ref_gpu_equivalents" in result["rows"][0]
    if extra:
        head += f" {i['ref_name'] + '-equiv.':>12}"
        if "yearly_offset_usd" in result["rows"][0]:
            head += f" {'$/year':>12}"
    lines += ["", head]
    for r in result["rows"]:
        line = (f"{r['nodes']:>6} {r['algorithm']:>{w}} {r['step_s'] * 1000:>10.1f} {r['comm_s'] * 1000:>10.1f} "
                f"{r['exposed_s'] * 1000:>9.1f} {r['samples_per_s']:>11.1f} {100 * r['efficiency']:>10.1f}%")
        if extra:
            line += f" {r['ref_gpu_equivalents']:>12.1f}"
            if "yearly_offset_usd" in r:
                line += f" {r['yearly_offset_usd']:>12,.0f}"
        lines.append(line)
    return "\n".join(lines)


def inputs_from_files(scaling: str | None, tune: str | None, matmul: str | None, matmul_ref: str | None,
                      backend: str = "mccl") -> dict:
    """Reads what it can from measurement files; returns Inputs fields."""
    out: dict = {"sources": {}}
    if scaling:
        with open(scaling) as f:
            s = json.load(f)
        one = next(r for r in s["runs"] if r["world"] == 1)
        out.update(params=one["params"], batch=one["batch_per_rank"], compute_s=one["step_s"])
        shares = [r["hidden_share"] for r in s["runs"] if r["world"] > 1 and r["backend"] == backend
                  and "hidden_share" in r]
        if shares:
            out["hidden"] = min(shares)
        if s.get("fsdp"):
            # Its one-rank step is still the compute time; the overlap model is DDP's.
            out["sources"]["step time"] = (f"{scaling} (an FSDP2 run: no hidden share; the plan models DDP, "
                                           "so give --bucket-mb or --hidden)")
        else:
            out["sources"]["step time and hidden share"] = f"{scaling} ({backend}, the least hidden of its runs)"
    if tune:
        vals = {}
        with open(tune) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if "=" in line:
                    k, v = line.split("=", 1)
                    vals[k.strip()] = float(v)
        out.update(alpha_us=vals.get("alpha_us", _NET["alpha_us"]),
                   overhead_us=vals.get("overhead_us", _NET["overhead_us"]),
                   beta_ns_per_byte=vals.get("beta_ns_per_byte", _NET["beta_ns_per_byte"]))
        out["sources"]["network"] = tune
    for path, key in ((matmul, "local_tflops"), (matmul_ref, "ref_tflops")):
        if path:
            with open(path) as f:
                m = json.load(f)
            fp32 = next(r for r in m["rows"] if r["dtype"] == "fp32")
            out[key] = fp32["tflops"]
            out["sources"][key] = f"{path} (fp32, {m['device']})"
    return out


# ---- DiLoCo: the outer sync (mccl.elastic.DiLoCoState) -----------------------------
# Bytes on the wire per float32 value: the 16-bit wires half; int8 one byte
# plus a float32 scale per 256 values.
WIRE_RATIO = {"fp32": 1.0, "bf16": 0.5, "fp16": 0.5, "int8": (1.0 + 4.0 / 256) / 4.0}


def diloco_project(params: int, H: int, inner_s: float, n: int, wire: str = "bf16", fragments: int = 1,
                   overlap: int | None = None, beta_ns_per_byte: float = _NET["beta_ns_per_byte"],
                   alpha_us: float = _NET["alpha_us"], overhead_us: float = _NET["overhead_us"],
                   host_s: float = 0.0, sync_factor: float = 1.0) -> dict:
    """One round of DiLoCo on n machines: H inner steps of `inner_s` each
    (compute, no communication), and `fragments` outer syncs of
    4 * params / fragments bytes of float32 pseudo-gradients, each sent as
    `wire` (WIRE_RATIO of the bytes; priced as MCCL's float32 all-reduce of
    that many bytes: the wire paths' pairwise exchange moves the same
    2(N-1)/N of the bytes per link as the ring) and overlapping `overlap`
    inner steps (diloco_plan.Schedule: 0 for one fragment, the gap between
    fragments with more). Fragment syncs never overlap each other (one is
    applied before the next is issued), so each exposes
    max(0, sync - overlap * inner_s). `host_s`: the outer steps' own work
    per round (the optimizer, the merges), measured. `sync_factor`: the
    measured sync time over this model's (mccl-bench diloco prints both; the
    16-bit wire's pairwise exchange measured 1.4-1.6x on the network lab).

        round(n)   = H * inner_s + fragments * max(0, sync_f(n) - tau * inner_s) + host_s
        utilisation = H * inner_s / round(n)
    """
    from .elastic.diloco_plan import Schedule
    tau = Schedule(H, fragments, overlap).tau
    frag_bytes = 4.0 * params / fragments * WIRE_RATIO[wire]
    sync_f = sync_factor * allreduce_seconds(frag_bytes, n, alpha_us, overhead_us, beta_ns_per_byte)[0]
    exposed = fragments * max(0.0, sync_f - tau * inner_s)
    round_s = H * inner_s + exposed + host_s
    return {"nodes": n, "utilisation": H * inner_s / round_s, "sync_s": fragments * sync_f, "exposed_s": exposed,
            "round_s": round_s, "per": "round", "fragments": fragments, "overlap": tau, "wire": wire,
            "bytes_per_round": fragments * frag_bytes, "host_s": host_s, "sync_factor": sync_factor}


def render_diloco(rows: list[dict], params: int, H: int, inner_s: float, gbit: float) -> str:
    r0 = rows[0]
    lines = [f"mccl plan: DiLoCo, {params:,} parameters ({4 * params / 1e9:.2f} GB float32), H = {H} inner steps "
             f"of {inner_s:g} s, {r0['fragments']} fragment(s) overlapping {r0['overlap']} inner step(s), "
             f"the {r0['wire']} wire ({r0['bytes_per_round'] / 1e9:.2f} GB per member per round), "
             f"{gbit:.2f} Gbit/s per link",
             f"{'nodes':>6} {'sync (s)':>9} {'exposed (s)':>12} {'round (s)':>10} {'utilisation':>12}"]
    for r in rows:
        lines.append(f"{r['nodes']:>6} {r['sync_s']:>9.2f} {r['exposed_s']:>12.2f} {r['round_s']:>10.1f} "
                     f"{100 * r['utilisation']:>11.1f}%")
    return "\n".join(lines)
