"""Compare-and-swap of one small object: the config store's only kind of write.

``swap(path, accept, text)`` reads what ``path`` holds now (None: nothing), asks ``accept`` whether
that is still what the writer's view was built on, and writes ``text`` only if nothing else wrote in
between; otherwise it raises ``StoreConflict`` and writes nothing. Two sie-config pods on one store (a
rolling update) can then never both take one epoch, nor one replace a model file the other just wrote.

- A folder: an exclusive ``flock`` on ``{base}/.lock`` held across the read and the write (released by
  the kernel if the process dies); the write is a temporary file, fsync, rename, fsync of the folder,
  so a file is whole or absent.
- S3: a PUT conditional on the ETag that was read (``If-Match``), or on there being no object
  (``If-None-Match: *``); S3 answers 412 when another PUT came first. moto's server does the same.
- GCS: an upload conditional on the generation that was read (``ifGenerationMatch``, 0 for none);
  GCS answers 412. Built on gcsfs's own request call; not run by the tests (no GCS here).

Another scheme has no conditional write here and is refused when the store is opened.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import quote

from fsspec import AbstractFileSystem

LOCK_FILE: Final = ".lock"
S3_SCHEMES: Final = frozenset({"s3", "s3a"})
GCS_SCHEMES: Final = frozenset({"gs", "gcs"})
# S3's answers when a condition failed, or when another conditional write to the key is under way.
_S3_LOST: Final = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})

Accept = Callable[[str | None], bool]


class StoreConflict(Exception):
    """Another writer changed the object since this writer read it: nothing was written."""


class Swapper(Protocol):
    def read(self, path: str) -> str | None: ...

    def swap(self, path: str, accept: Accept, text: str) -> None: ...


def swapper(location: str, fs: AbstractFileSystem, base: str) -> Swapper:
    scheme = location.partition("://")[0] if "://" in location else "file"
    if scheme == "file":
        return FolderSwap(base)
    if scheme in S3_SCHEMES:
        return S3Swap(fs)
    if scheme in GCS_SCHEMES:
        return GcsSwap(fs)
    raise ValueError(
        f"SIE_CONFIG_STORE_DIR={location}: {scheme}:// has no conditional write here, so two writers "
        "could lose each other's configs; use a folder, s3:// or gs://"
    )


def _refuse(path: str, current: str | None) -> StoreConflict:
    held = "nothing" if current is None else f"{len(current)} bytes another writer wrote"
    return StoreConflict(f"{path} holds {held}, not what this writer read")


class FolderSwap:
    def __init__(self, base: str) -> None:
        self._lock = os.path.join(base, LOCK_FILE)

    def read(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def swap(self, path: str, accept: Accept, text: str) -> None:
        with open(self._lock, "ab") as lock:  # "a" creates it and never truncates another's
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self.read(path)
            if not accept(current):
                raise _refuse(path, current)
            _write_whole(path, text.encode("utf-8"))


def _write_whole(path: str, data: bytes) -> None:
    folder = os.path.dirname(path)
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the store from an operator's tools
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power cut only once the folder is synced
    finally:
        os.close(directory)


class S3Swap:
    def __init__(self, fs: AbstractFileSystem) -> None:
        self._fs = fs

    def _versioned(self, path: str) -> tuple[str | None, str | None]:
        """The text and its ETag. The ETag is read first: if the object changes before the text is
        read, the PUT conditional on that ETag fails, so a stale pair never writes."""
        self._fs.invalidate_cache(path)  # a listing's cached ETag would be a stale condition
        try:
            etag = str(self._fs.info(path)["ETag"])
            data: bytes = self._fs.cat_file(path)
        except FileNotFoundError:
            return None, None
        return data.decode("utf-8"), etag

    def read(self, path: str) -> str | None:
        return self._versioned(path)[0]

    def swap(self, path: str, accept: Accept, text: str) -> None:
        current, etag = self._versioned(path)
        if not accept(current):
            raise _refuse(path, current)
        condition: dict[str, Any] = {"IfMatch": etag} if etag is not None else {"mode": "create"}
        try:
            self._fs.pipe_file(path, text.encode("utf-8"), **condition)
        except (FileExistsError, FileNotFoundError) as exc:  # created, or deleted, meanwhile
            raise StoreConflict(f"{path} changed while this writer wrote it") from exc
        except OSError as exc:
            error = getattr(exc.__cause__, "response", {}).get("Error", {})
            if error.get("Code") in _S3_LOST:
                raise StoreConflict(f"{path} changed while this writer wrote it") from exc
            raise


class GcsSwap:
    def __init__(self, fs: AbstractFileSystem) -> None:
        self._fs = fs

    def _versioned(self, path: str) -> tuple[str | None, int]:
        """The text and its generation, from one read (0: no object, GCS's condition for a new one)."""
        bucket, key, _ = self._fs.split_path(path)
        try:
            headers, data = self._fs.call("GET", "b/{}/o/{}", bucket, key, alt="media")
        except FileNotFoundError:
            return None, 0
        return bytes(data).decode("utf-8"), int(headers["x-goog-generation"])

    def read(self, path: str) -> str | None:
        return self._versioned(path)[0]

    def swap(self, path: str, accept: Accept, text: str) -> None:
        current, generation = self._versioned(path)
        if not accept(current):
            raise _refuse(path, current)
        bucket, key, _ = self._fs.split_path(path)
        upload = f"{self._fs._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o"
        try:
            self._fs.call(
                "POST",
                upload,
                uploadType="media",
                name=key,
                ifGenerationMatch=str(generation),
                data=text.encode("utf-8"),
                headers={"Content-Type": "text/plain; charset=utf-8"},
                json_out=True,
            )
        except FileExistsError as exc:  # gcsfs's word for 412 Precondition Failed
            raise StoreConflict(f"{path} changed while this writer wrote it") from exc
        self._fs.invalidate_cache(path)
