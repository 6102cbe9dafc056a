"""Where the model YAMLs come from: a local folder, or an ``s3://`` / ``gs://`` prefix.

A remote directory is copied (its top-level ``*.yaml``/``*.yml``, through fsspec like the cluster
cache) into a private temporary folder once at startup, and everything after that (parsing,
``Catalog.from_directory``, the miss messages) runs on the copy: one code path for both. Relative
``weights_path`` entries in remote YAMLs resolve against that copy, which holds no weights, so remote
catalogues name models by ``hf_id`` (or absolute paths). Hot reload watches local folders only.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from pathlib import Path

from sie.catalog.model_config import ModelConfigError
from sie.weights.remote_fs import filesystem, is_remote

log = logging.getLogger(__name__)

_SUFFIXES = (".yaml", ".yml")


def models_directory(location: str) -> Path:
    """A local folder holding the YAMLs of ``location``; a remote one is copied first."""
    if not is_remote(location):
        return Path(location).expanduser()
    try:
        fs, root = filesystem(location)
        fs.invalidate_cache(root)
        names = [p for p in fs.ls(root, detail=False) if p.lower().endswith(_SUFFIXES)]
    except ImportError:
        raise
    except FileNotFoundError:
        raise ModelConfigError(f"{location}: models directory does not exist") from None
    except Exception as exc:  # any store error: startup stops with the reason
        raise ModelConfigError(f"{location}: models directory could not be listed: {exc}") from exc
    if not names:
        raise ModelConfigError(f"{location}: models directory has no *.yaml files")
    local = Path(tempfile.mkdtemp(prefix="sie-models-"))
    atexit.register(shutil.rmtree, local, ignore_errors=True)
    try:
        fs.get(names, [str(local / p.rsplit("/", 1)[-1]) for p in names])
    except Exception as exc:
        raise ModelConfigError(f"{location}: model YAMLs could not be copied: {exc}") from exc
    log.info("read %d model YAMLs from %s (local copy %s)", len(names), location, local)
    return local
