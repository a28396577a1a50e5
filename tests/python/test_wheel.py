"""The wheel and the torch it was built for.

- The import-time check (mccl._torch_check): a wheel built for another torch
  release fails at ``import mccl`` with an ImportError that says which torch
  it was built for, which is installed and what to install, before the
  extension is loaded; an extension that fails to load for another reason is
  re-raised with the same advice. Tested with made-up versions: no second
  torch needed.
- The wheel itself (slow): built with ``pip wheel --no-build-isolation``,
  installed into a fresh venv with this machine's torch, and ``mccl selftest``
  run there from outside the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
import torch

import mccl
from mccl import _torch_check

ROOT = Path(__file__).resolve().parents[2]


def test_release_parses_torch_versions():
    assert _torch_check.release("2.13.0+cpu") == (2, 13)
    assert _torch_check.release("2.14.0a0+git1234abc") == (2, 14)
    assert _torch_check.release("2.9.1+cu126") == (2, 9)
    assert _torch_check.release("nonsense") is None


def test_mismatch_message_names_both_torches_and_what_to_install():
    msg = _torch_check.mismatch_message("2.11.0+cpu", "2.13.0+cu126")
    assert msg is not None
    for needle in ("compiled for torch 2.11.0+cpu", "torch 2.13.0+cu126 is installed",
                   'pip install "torch==2.11.*"', "a torch-mccl wheel built for torch 2.13",
                   "pip install --no-build-isolation ."):
        assert needle in msg, (needle, msg)


def test_same_release_is_no_mismatch():
    # Patch releases and local tags (+cpu / +cu126) of one release agree; a
    # real ABI difference between them shows as a load failure instead.
    assert _torch_check.mismatch_message("2.13.0+cpu", "2.13.1+cu126") is None
    assert _torch_check.mismatch_message("2.13.0", "2.13.0") is None
    assert _torch_check.mismatch_message(None, "2.13.0") is None  # no build record


def test_load_failure_keeps_the_loaders_words():
    err = ImportError("mccl/_C.so: undefined symbol: _ZN3c1015SmallVectorBase")
    msg = _torch_check.load_failure_message("2.13.0+cpu", "2.13.1+cpu", err)
    assert "compiled for torch 2.13.0+cpu" in msg and "torch 2.13.1+cpu is installed" in msg
    assert 'pip install "torch==2.13.*"' in msg and "pip install --no-build-isolation ." in msg
    assert "undefined symbol: _ZN3c1015SmallVectorBase" in msg
    msg = _torch_check.load_failure_message(None, "2.13.0", ModuleNotFoundError("No module named 'mccl._C'"))
    assert "no build information" in msg and "pip install --no-build-isolation ." in msg


# One interpreter runs the three imports (torch costs seconds to import):
# a build record that names another torch release; one that names this torch
# but an extension that cannot load (sys.modules["mccl._C"] = None makes
# `from . import _C` fail the way a missing or broken module does); then the
# real mccl, whose build record and `mccl --version` name this torch.
_IMPORTS = r"""
import json, sys, types
import torch
out = {}

def attempt(name, built, break_c):
    for m in [m for m in sys.modules if m == "mccl" or m.startswith("mccl.")]:
        del sys.modules[m]
    fake = types.ModuleType("mccl._build_info")
    fake.TORCH_VERSION = built
    sys.modules["mccl._build_info"] = fake
    if break_c:
        sys.modules["mccl._C"] = None
    try:
        import mccl  # noqa: F401
        out[name] = {"error": None}
    except ImportError as e:
        out[name] = {"error": str(e), "c_loaded": sys.modules.get("mccl._C") is not None}

attempt("other_release", "1.99.0+cpu", False)
attempt("broken_extension", torch.__version__, True)
for m in [m for m in sys.modules if m == "mccl" or m.startswith("mccl.")]:
    del sys.modules[m]
import mccl
from mccl import cli
out["real"] = {"build_info": mccl.build_info(), "build_torch": mccl.__build_torch__,
               "version_text": cli.version_text()}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def imports():
    p = subprocess.run([sys.executable, "-c", _IMPORTS], capture_output=True, text=True, timeout=120,
                       cwd=tempfile.gettempdir())
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


def test_import_under_another_torch_release_fails_before_loading_the_extension(imports):
    r = imports["other_release"]
    assert r["error"] and not r["c_loaded"], r
    assert "compiled for torch 1.99.0+cpu" in r["error"]
    assert f"torch {torch.__version__} is installed" in r["error"]
    assert 'pip install "torch==1.99.*"' in r["error"]


def test_extension_load_failure_is_reraised_with_advice(imports):
    r = imports["broken_extension"]
    assert r["error"], r
    assert f"compiled for torch {torch.__version__}" in r["error"]
    assert "pip install --no-build-isolation ." in r["error"]
    assert "The loader said: " in r["error"] and "mccl._C" in r["error"]


def test_installed_build_records_this_torch(imports):
    r = imports["real"]
    assert r["build_torch"] == torch.__version__, r
    b = r["build_info"]
    assert b["torch"] == torch.__version__ and b["mccl"].startswith(mccl.__version__), b
    assert b["cxx11_abi"] in (True, False) and b["platform"] and b["python"], b
    assert f"built for torch {torch.__version__}" in r["version_text"], r["version_text"]
    assert f"running with torch {torch.__version__}" in r["version_text"]


def test_version_has_one_source():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version", "dependencies"]' in text and '\nversion = "' not in text
    assert 'input = "python/mccl/_version.py"' in text
    from mccl._version import __version__
    assert mccl.__version__ == __version__


# --- the wheel, in a fresh venv ----------------------------------------------

def _run(cmd, timeout, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_passes_selftest(tmp_path):
    """The wheel is built from this working tree as `pip wheel --no-build-
    isolation --no-deps .` does, in the build folder scripts/setup.sh keeps
    (build/<wheel tag>), so after setup it only packs; MCCL_WHEEL_TEST_BUILD_DIR
    names another (empty: a full compile, several minutes on 2 cores)."""
    t0 = time.monotonic()
    wheels = tmp_path / "wheels"
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(wheels)]
    if os.environ.get("MCCL_WHEEL_TEST_BUILD_DIR"):
        cmd += ["--config-settings", f"build-dir={os.environ['MCCL_WHEEL_TEST_BUILD_DIR']}"]
    p = _run(cmd + [str(ROOT)], 1500, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    (whl,) = wheels.glob("torch_mccl-*.whl")
    t_wheel = time.monotonic() - t0

    # What the wheel says about itself: the pin on this torch's release, and
    # the build record inside.
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        info = z.read("mccl/_build_info.py").decode()
    assert f"Requires-Dist: torch=={release}.*" in meta, meta
    assert f'TORCH_VERSION = "{torch.__version__}"' in info, info
    assert any(n.startswith("mccl/_C") and n.endswith((".so", ".pyd")) for n in names), names

    # A fresh venv with this machine's torch (a local wheel where pip has one,
    # else the index), then the wheel; no network and no local file: skip.
    venv = tmp_path / "venv"
    p = _run([sys.executable, "-m", "venv", str(venv)], 300)
    assert p.returncode == 0, p.stderr
    vpy = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    p = _run([str(vpy), "-m", "pip", "install", "-q", "--retries", "1", f"torch=={torch.__version__}"], 1200)
    if p.returncode != 0:
        pytest.skip(f"the fresh venv could not get torch=={torch.__version__} (no local wheel and no "
                    f"index reachable?): {(p.stdout + p.stderr).strip()[-600:]}")
    t_torch = time.monotonic() - t0 - t_wheel
    p = _run([str(vpy), "-m", "pip", "install", "-q", str(whl)], 600)  # its deps: this torch, met
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    # From outside the repository, so that only the installed wheel can be imported.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    venv_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    venv_env.update(OMP_NUM_THREADS="1", PATH=str(vpy.parent) + os.pathsep + os.environ.get("PATH", ""))
    mccl_cmd = vpy.parent / "mccl"
    p = _run([str(mccl_cmd), "--version"], 120, cwd=outside, env=venv_env)
    assert p.returncode == 0 and f"built for torch {torch.__version__}" in p.stdout, p.stdout + p.stderr
    p = _run([str(mccl_cmd), "selftest", "--ranks", "2", "--quick", "--timeout", "300"], 420,
             cwd=outside, env=venv_env)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "selftest: all checks passed" in out, out[-4000:]
    line = next(x for x in out.splitlines() if x.strip().startswith("mccl_built_for"))
    assert f"torch {release}." in line, line
    loc = _run([str(vpy), "-c", "import mccl; print(mccl.__file__)"], 120, cwd=outside, env=venv_env)
    assert str(venv) in loc.stdout, loc.stdout + loc.stderr
    print(f"wheel {whl.name}: built in {t_wheel:.0f} s, torch into the venv in {t_torch:.0f} s, "
          f"all in {time.monotonic() - t0:.0f} s")
