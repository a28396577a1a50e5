"""The ViT example (the headline workload) and mccl-bench matmul."""

import json
import math
import subprocess
import sys
from pathlib import Path

from mccl.launch import run

ROOT = Path(__file__).resolve().parents[2]
VIT = ROOT / "examples" / "train_vit.py"  # wrapper around mccl.workloads.vit


def test_default_vit_has_the_reference_parameter_count():
    from mccl.workloads import vit

    model = vit.build("vit-113m")
    assert sum(p.numel() for p in model.parameters()) == 113_503_498


def test_vit_trains_over_mccl_and_reports_overlap():
    res = run([sys.executable, str(VIT), "--preset", "tiny", "--steps", "3", "--warmup", "1", "--batch", "8",
               "--measure-overlap", "--threads", "1", "--quiet"], 2, timeout=240, env={"OMP_NUM_THREADS": "1"})
    out = res[0].output
    result = json.loads(out[out.index("RESULT ") + 7:].splitlines()[0])
    assert result["world"] == 2 and result["backend"] == "mccl"
    assert result["samples_per_s"] > 0 and math.isfinite(result["final_loss"])
    assert 0.0 <= result["hidden_share"] <= 1.0
    assert result["allreduce_s"] > 0 and result["step_nosync_s"] > 0


def test_vit_trains_with_fsdp_like_gloo():
    # FSDP2 (all-gather + reduce-scatter per block) on an odd world: the same
    # data and initial weights give the same loss over MCCL as over Gloo.
    losses = {}
    for backend in ("mccl", "gloo"):
        res = run([sys.executable, str(VIT), "--preset", "tiny", "--steps", "3", "--warmup", "1", "--batch", "4",
                   "--fsdp", "--backend", backend, "--threads", "1", "--quiet"], 3, timeout=240,
                  env={"OMP_NUM_THREADS": "1"})
        out = res[0].output
        result = json.loads(out[out.index("RESULT ") + 7:].splitlines()[0])
        assert result["fsdp"] is True and result["world"] == 3 and "hidden_share" not in result
        losses[backend] = result["final_loss"]
    assert math.isfinite(losses["mccl"])
    assert abs(losses["mccl"] - losses["gloo"]) <= 1e-4 * max(1.0, abs(losses["gloo"])), losses


def test_matmul_reports_every_precision(tmp_path):
    out = tmp_path / "mm.json"
    p = subprocess.run([sys.executable, "-m", "mccl.bench", "matmul", "--device", "cpu", "-n", "256",
                        "--repeats", "2", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["dtype"] for r in rows] == ["fp32", "tf32", "bf16"]
    assert all(r["tflops"] > 0 for r in rows)
    assert "TFLOP/s" in p.stdout
