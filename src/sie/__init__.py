"""Inference engine for search workloads: encode, score and extract over one wire-compatible API."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sie-engine")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.10.0"

__all__ = ["__version__"]
