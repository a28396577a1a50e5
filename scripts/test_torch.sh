#!/usr/bin/env bash
# Builds MCCL against any torch release and runs the Python suite with it, so
# that what the README's torch table says is checked rather than assumed.
# Nothing here touches the main interpreter or this tree's build/:
#   - the torch goes into its own venv (outside the repository);
#   - the working tree (tracked and untracked, not ignored files) is copied to
#     a scratch folder and built there, so scikit-build's build/ in the copy
#     never clobbers the build folder of this checkout.
#   bash scripts/test_torch.sh 2.5.1                   # the oldest the README claims: the whole Python suite
#   bash scripts/test_torch.sh 2.15.0 -m "not slow"    # the newest; arguments after the version go to pytest
#   bash scripts/test_torch.sh 2.15.0 tests/python/test_torch_suite.py   # PyTorch's own suite tier
#   PYTHON=python3.12 VENV=/tmp/v bash scripts/test_torch.sh 2.11.0
#   PATCH=fix.diff bash scripts/test_torch.sh 2.5.1    # try a fix in the copy only
#   REF=HEAD bash scripts/test_torch.sh 2.5.1          # the last commit, not the working tree
# The version may also come from TORCH_VERSION (default 2.5.1). A machine
# whose pip is capped by a constraints file (pip config list) is not capped in
# the venv (PIP_CONFIG_FILE=/dev/null there). PyPI's torch for Linux x86-64
# is the CUDA build, which pulls the nvidia-* wheels (several GB in the venv);
# the CPU-only wheels live on download.pytorch.org, which may not be
# reachable. Downloads are cached by pip and the venv and the copy's build
# folder are kept, so a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [[ ${1:-} =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then TORCH_VERSION=$1; shift; fi
TORCH_VERSION=${TORCH_VERSION:-2.5.1}
PY=${PYTHON:-python3}
CACHE=${MCCL_CACHE:-$HOME/.cache/mccl}
VENV=${VENV:-$CACHE/venv-torch$TORCH_VERSION}
SRC=${SRC_COPY:-$CACHE/src-torch$TORCH_VERSION}
# Two cores are typical for the machines this runs on; a parallel build of the
# extension takes about 1 GB of memory per job.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}

say() { printf '\n== %s\n' "$*"; }

# The venv: torch pinned to the claimed minimum, and the build and test tools
# (the same set as scripts/setup.sh, plus expecttest, which some of torch's own
# testing helpers import).
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV ($($PY --version))"
  mkdir -p "$(dirname "$VENV")"
  $PY -m venv "$VENV"
fi
VPY=$VENV/bin/python
if [ "$($VPY -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)" != "$TORCH_VERSION" ]; then
  say "installing torch==$TORCH_VERSION into $VENV (from PyPI on Linux x86-64: the CUDA build, several GB)"
  PIP_CONFIG_FILE=/dev/null $VPY -m pip install -q --upgrade pip
  PIP_CONFIG_FILE=/dev/null $VPY -m pip install -q "torch==$TORCH_VERSION"
fi
missing=()
for mod in pytest numpy cmake ninja scikit_build_core expecttest selenium prometheus_client; do
  $VPY -c "import $mod" 2>/dev/null || missing+=("$mod")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  PIP_CONFIG_FILE=/dev/null $VPY -m pip install -q "${missing[@]/scikit_build_core/scikit-build-core>=1.1}"
fi
# The venv's cmake and ninja come first (scikit-build-core looks them up on PATH).
export PATH=$VENV/bin:$PATH

# The copy: every file git would commit from this working tree (uncommitted
# edits included), or with REF=<commit> that commit alone (to tell torch-version
# failures from work in progress). It is staged first, then only files whose
# content differs are written into the copy: they get a fresh timestamp, the
# others keep theirs, so the kept build/ rebuilds exactly what changed (tar
# would restore old timestamps, and ninja would then skip changed files).
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
if [ -n "${REF:-}" ]; then
  say "copying $REF to $SRC"
  git -C "$ROOT" archive --format=tar "$REF" | tar -xf - -C "$STAGE"
else
  say "copying the working tree to $SRC"
  # Deleted-but-tracked files are listed by git but absent: tar skips them.
  git -C "$ROOT" ls-files -z --cached --others --exclude-standard |
    (cd "$ROOT" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$STAGE"
fi
# PATCH=file.diff: a fix to try against this torch, applied to the copy only.
if [ -n "${PATCH:-}" ]; then
  say "applying $PATCH to the copy"
  patch -p1 -d "$STAGE" <"$PATCH"
fi
mkdir -p "$SRC"
(cd "$STAGE" && find . -type f -print0) | while IFS= read -r -d '' f; do
  cmp -s "$STAGE/$f" "$SRC/$f" || { mkdir -p "$(dirname "$SRC/$f")" && cp "$STAGE/$f" "$SRC/$f"; }
done
(cd "$SRC" && find . -path ./build -prune -o -type f -print0) | while IFS= read -r -d '' f; do
  [ -e "$STAGE/$f" ] || rm -f "$SRC/$f"
done
rm -rf "$STAGE"

# The build, as scripts/setup.sh does it: no build isolation (an isolated build
# would download the newest torch and build against that instead).
say "building mccl against torch $($VPY -c 'import torch; print(torch.__version__)')"
mkdir -p "$CACHE"; LOG=$CACHE/build-torch$TORCH_VERSION.log
if ! (cd "$SRC" && PIP_CONFIG_FILE=/dev/null $VPY -m pip install -v --no-build-isolation . >"$LOG" 2>&1); then
  grep -n -E "error|Error" "$LOG" | head -n 60 || true
  echo "build failed against torch $TORCH_VERSION; full log: $LOG" >&2
  exit 1
fi
(cd /tmp && $VPY -c "import mccl, mccl._C, torch; print('mccl', mccl.__version__, 'on torch', torch.__version__)")

# The suite, from the copy (the tests read its docs, examples and workers).
# No path here: pyproject's testpaths is tests/python, so arguments may name
# test files of their own (tests/python/test_mps.py) as well as options.
say "Python tests against torch $TORCH_VERSION"
cd "$SRC"
$VPY -m pytest -q "$@"
