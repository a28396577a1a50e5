"""MCCL's version, written here and nowhere else: the wheel's version is read
from this line at build time (pyproject.toml's regex provider), and
``mccl.__version__`` imports it."""

__version__ = "0.1.0"
