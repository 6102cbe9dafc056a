"""The config service's durable store: one YAML per API-added model and the epoch, in one place.

Layout (the public service's, so a store written by either can be read by the other):
``{base}/models/{model id with "/" → "__"}.yaml`` and ``{base}/epoch`` (a plain integer). ``base`` is a
folder or ``s3://bucket/prefix`` / ``gs://...`` through the same fsspec layer as the weight cache.

Every write is whole or absent: a folder gets write-to-temp, fsync, rename, fsync of the folder; an
object store gets one PUT, which its API makes atomic. The writer bumps the epoch *before* it writes
the model: a crash between the two leaves an epoch with nothing new (followers re-export and find
nothing), never a stored model that followers cannot learn about because the epoch did not move.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Final

from sie.weights.remote_fs import filesystem, is_remote

log = logging.getLogger(__name__)

MODELS_FOLDER: Final = "models"
EPOCH_FILE: Final = "epoch"


class StoreError(ValueError):
    """A model id the store cannot hold (``__`` is its path separator)."""


def file_name(model_id: str) -> str:
    if "__" in model_id:
        raise StoreError(
            f"Model ID {model_id!r} contains reserved sequence '__'. Use '/' as the separator (e.g., 'org/model')."
        )
    return model_id.replace("/", "__") + ".yaml"


class ConfigStore:
    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")
        self._fs, self._base = filesystem(self.location)
        self._local = not is_remote(self.location)
        self._fs.makedirs(f"{self._base}/{MODELS_FOLDER}", exist_ok=True)

    def _path(self, *parts: str) -> str:
        return "/".join((self._base, *parts))

    def _write(self, path: str, text: str) -> None:
        data = text.encode("utf-8")
        if not self._local:
            self._fs.pipe_file(path, data)
            return
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

    def _read(self, path: str) -> str | None:
        try:
            with self._fs.open(path, "rb") as handle:
                data: bytes = handle.read()
        except FileNotFoundError:
            return None
        return data.decode("utf-8")

    def read_epoch(self) -> int:
        """0 for a new store; an unreadable epoch is logged and read as 0, as the public service does."""
        text = self._read(self._path(EPOCH_FILE))
        if not text or not text.strip():
            return 0
        try:
            return int(text.strip())
        except ValueError:
            log.warning("epoch file of %s holds %r, not an integer; reading it as 0", self.location, text)
            return 0

    def write_epoch(self, epoch: int) -> None:
        self._write(self._path(EPOCH_FILE), str(epoch))

    def write_model(self, model_id: str, text: str) -> None:
        self._write(self._path(MODELS_FOLDER, file_name(model_id)), text)

    def read_model(self, model_id: str) -> str | None:
        return self._read(self._path(MODELS_FOLDER, file_name(model_id)))

    def delete_model(self, model_id: str) -> bool:
        path = self._path(MODELS_FOLDER, file_name(model_id))
        if not self._fs.exists(path):
            return False
        self._fs.rm_file(path)
        return True

    def model_ids(self) -> list[str]:
        self._fs.invalidate_cache()
        try:
            names = self._fs.ls(self._path(MODELS_FOLDER), detail=False)
        except FileNotFoundError:
            return []
        files = (str(name).rsplit("/", 1)[-1] for name in names)
        return sorted(
            f.removesuffix(".yaml").replace("__", "/")
            for f in files
            if f.endswith(".yaml") and not f.startswith(".")
        )

    def load_all(self) -> dict[str, str]:
        """Every stored model's YAML text, by id."""
        texts = {model_id: self.read_model(model_id) for model_id in self.model_ids()}
        return {model_id: text for model_id, text in texts.items() if text is not None}
