"""Whether the installed torch is the one this build of mccl was compiled for.

mccl._C is compiled against one torch release; its C++ symbols change from
one release to the next, and at times within one. ``import mccl`` checks the
release before it loads the extension, so a mismatch says what to do instead
of failing with "undefined symbol". Nothing here imports torch or mccl._C, so
the messages are unit-tested with made-up versions.
"""

from __future__ import annotations

import re

SOURCE_BUILD = "pip install --no-build-isolation .  (in a checkout of MCCL, with the torch you want installed)"


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version such as '2.13.0+cpu' or '2.14.0a0+git1234';
    None where it does not parse."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _advice(built: str, installed: str) -> str:
    b, i = release(built), release(installed)
    pin = f"{b[0]}.{b[1]}" if b else built
    here = f"{i[0]}.{i[1]}" if i else installed
    return ("Either:\n"
            f"  - install the torch it was built for:  pip install \"torch=={pin}.*\"\n"
            f"  - or install a torch-mccl wheel built for torch {here} (one that depends on torch=={here}.*)\n"
            f"  - or build mccl from source against the installed torch:  {SOURCE_BUILD}")


def mismatch_message(built: str, installed: str) -> str | None:
    """The ImportError's text when the installed torch's release (major.minor)
    is not the build's; None when they agree (or the build's is unknown)."""
    b, i = release(built), release(installed)
    if b is None or i is None or b == i:
        return None
    return (f"mccl: this build of mccl (torch-mccl) was compiled for torch {built}, but torch "
            f"{installed} is installed. Its extension, mccl._C, works only with the torch release "
            f"it was compiled for ({b[0]}.{b[1]}.x), so it was not loaded.\n" + _advice(built, installed))


def load_failure_message(built: str | None, installed: str, error: BaseException) -> str:
    """The ImportError's text when mccl._C fails to load although the releases
    agree: most often a C++ ABI difference between patch releases of torch
    ("undefined symbol") or a build of another torch left behind."""
    if built:
        head = (f"mccl: the extension mccl._C did not load. It was compiled for torch {built}; torch "
                f"{installed} is installed. Within one release this is most often an ABI difference "
                f"between torch builds (an \"undefined symbol\" below).\n" + _advice(built, installed))
    else:
        head = (f"mccl: the extension mccl._C did not load (torch {installed} is installed; this mccl "
                f"records no build information, e.g. a source tree that was never built). Build it "
                f"against the installed torch:  {SOURCE_BUILD}")
    return f"{head}\nThe loader said: {type(error).__name__}: {error}"
