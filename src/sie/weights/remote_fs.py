"""Object stores and plain folders behind one interface (fsspec), for the cluster cache and a remote
models directory.

fsspec is the filesystem layer that pandas, Dask and Hugging Face ``datasets`` already use; its S3
(s3fs, on aiobotocore) and GCS (gcsfs) backends are maintained by the same project. One call,
``fsspec.core.url_to_fs``, turns ``s3://bucket/prefix``, ``gs://...`` or ``/mnt/share`` into a filesystem
and a path, so the cluster cache has one code path for all three and the tests run it against a real
S3 API (moto) and a plain folder alike. obstore was the other candidate: faster on huge files, but
a Rust extension with its own API and no local-folder backend in the same shape.

Credentials and endpoints come from each backend's standard configuration: for S3 the AWS
variables and files (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL`` for MinIO or another
S3-compatible store, instance roles), for GCS Application Default Credentials. fsspec's own
``FSSPEC_S3_ENDPOINT_URL``-style variables work too. gcsfs is not installed by default: a ``gs://``
location without it fails with fsspec's ImportError naming the package.
"""

from __future__ import annotations

import logging
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)

# Fail fast when the store is down: botocore's default schedule keeps a load waiting for a minute or
# more before it can tell the operator the store is unreachable.
_STORAGE_OPTIONS: dict[str, dict[str, Any]] = {
    "s3": {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2}}},
}


def is_remote(location: str) -> bool:
    """A URL with a scheme other than ``file``; plain paths (and Windows drive letters) are local."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and len(scheme) > 1 and scheme != "file"


def filesystem(location: str) -> tuple[AbstractFileSystem, str]:
    """The filesystem of ``location`` and the path inside it (bucket/prefix for object stores)."""
    scheme = location.partition("://")[0] if is_remote(location) else "file"
    # A fresh instance each time: fsspec would otherwise hand back one built under other settings
    # (endpoint, credentials) and its stale listings; loads are rare enough for the cost not to matter.
    options = {"skip_instance_cache": True, **_STORAGE_OPTIONS.get(scheme, {})}
    fs, path = fsspec.core.url_to_fs(location, **options)
    return fs, str(path).rstrip("/")
