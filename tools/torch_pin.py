"""Build-time metadata for the torch-mccl wheel (a scikit-build-core
dynamic-metadata provider; pyproject.toml's [[tool.dynamic-metadata]] names
it). mccl._C is compiled against the torch installed in the build
environment and runs only with that torch release, so the wheel depends on
``torch==X.Y.*`` for it, the way torchvision's and torchaudio's wheels pin
theirs. An sdist (built again on the user's machine, against whatever torch
is there) keeps the loose ``torch>=2.5`` and marks its dependencies Dynamic.

With MCCL_WHEEL_LOCAL_VERSION=1 (the wheel workflow sets it) the version gets
a local tag naming the torch release, 0.1.0+torch2.13, so that wheels for
several torch releases can lie side by side. Indexes such as PyPI refuse local
versions: a release published there is built without it.

Settings (the rest of the table): ``dependencies``, the other requirements,
listed after torch's.
"""

from __future__ import annotations

import os
import re
from importlib import metadata

LOOSE = "torch>=2.5"


def installed_torch() -> str:
    """The version of the torch that the build compiles against (the one
    installed where the build runs), e.g. '2.13.0+cpu'."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        raise RuntimeError(
            "torch-mccl is compiled against the installed torch, and none is installed here: install "
            "torch first (pip install torch==X.Y.*), then build without isolation: "
            "pip install --no-build-isolation .") from None


def release(torch_version: str) -> str:
    """'2.13' for '2.13.0+cpu'."""
    m = re.match(r"(\d+)\.(\d+)", torch_version)
    if not m:
        raise RuntimeError(f"cannot read a release from the installed torch's version {torch_version!r}")
    return f"{m.group(1)}.{m.group(2)}"


class Provider:
    def __init__(self) -> None:
        self.state = "wheel"

    def build_state(self, state: str) -> None:
        self.state = state

    def get_requires_for_dynamic_metadata(self, settings) -> list[str]:
        return [LOOSE]

    def dynamic_wheel(self, settings) -> dict[str, bool]:
        return {"dependencies": True}

    def dynamic_metadata(self, settings, project) -> dict:
        others = list(settings.get("dependencies", []))
        if self.state == "sdist":
            return {"dependencies": [LOOSE, *others]}
        built_for = release(installed_torch())
        out = {"dependencies": [f"torch=={built_for}.*", *others]}
        if os.environ.get("MCCL_WHEEL_LOCAL_VERSION") == "1":
            out["version"] = f"{project['version']}+torch{built_for}"
        return out
