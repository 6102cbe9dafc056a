"""The config service's durable store: one YAML per API-added model and the epoch, in one place.

Layout (the public service's, so a store written by either can be read by the other):
``{base}/models/{model id with "/" → "__"}.yaml`` and ``{base}/epoch`` (a plain integer). ``base`` is a
folder or ``s3://bucket/prefix`` / ``gs://...`` through the same fsspec layer as the weight cache.

The file name must say which id it holds, or a restart gives one id's file to another: an id with
``__``, or with ``_`` beside a ``/`` (``a_/b`` and ``a/_b`` would both be ``a___b.yaml``), is refused
(``storable``), and every other id's name maps back to it alone (``model_id_of``).

Every write is a compare-and-swap (``swap``): the epoch moves from the value this writer holds to the
next one only if the store still holds that value, and a model's file is replaced only if it still
holds what this writer's registry was built from. A writer that loses a race is told
(``StoreConflict``) and writes nothing; it reads the store again before it retries.

The writer bumps the epoch *before* it writes the model: a crash between the two leaves an epoch with
nothing new (followers re-export and find nothing), never a stored model that followers cannot learn
about because the epoch did not move. An epoch file that is not an integer stops the start
(``EpochUnreadable``): reading it as 0 would move every follower's epoch backwards.
"""

from __future__ import annotations

import logging
from typing import Final

from sie.control.swap import StoreConflict, swapper
from sie.weights.remote_fs import filesystem

log = logging.getLogger(__name__)

__all__ = ["ConfigStore", "EpochUnreadable", "StoreConflict", "StoreError", "file_name", "model_id_of"]

MODELS_FOLDER: Final = "models"
EPOCH_FILE: Final = "epoch"
SEPARATOR: Final = "__"  # what "/" becomes in a file name
# Each sequence would make two ids one file name: "__" is a "/" already, "_/" and "/_" give "___".
AMBIGUOUS: Final = (SEPARATOR, "_/", "/_")


class StoreError(ValueError):
    """A model id the store cannot hold under a name of its own."""


class EpochUnreadable(ValueError):
    """The epoch file holds something other than a non-negative integer."""


def file_name_of(model_id: str) -> str:
    """The file name ``model_id`` has, storable or not (``file_name`` refuses the ids that share one)."""
    return model_id.replace("/", SEPARATOR) + ".yaml"


def storable(model_id: str) -> str | None:
    """Why the store cannot hold ``model_id`` (None: it can)."""
    for sequence in AMBIGUOUS:
        if sequence in model_id:
            if sequence == SEPARATOR:
                return (
                    f"Model ID {model_id!r} contains reserved sequence '__'. Use '/' as the separator "
                    "(e.g., 'org/model')."
                )
            return (
                f"Model ID {model_id!r} puts '_' next to '/': stored as {file_name_of(model_id)}, "
                "another ID would have the same file. "
                "Start and end each part between '/' with a letter, digit, '.' or '-'."
            )
    return None


def file_name(model_id: str) -> str:
    reason = storable(model_id)
    if reason is not None:
        raise StoreError(reason)
    return file_name_of(model_id)


def model_id_of(name: str) -> str:
    """The id a file name holds: the inverse of ``file_name`` over every storable id (its runs of
    ``_`` are one ``_``, or a "/" per ``__``)."""
    return name.removesuffix(".yaml").replace(SEPARATOR, "/")


def parse_epoch(text: str | None, where: str) -> int:
    """0 for no epoch yet (no file, or an empty one, as the public service reads them)."""
    if text is None or not text.strip():
        return 0
    value = text.strip()
    if not value.isdigit():
        raise EpochUnreadable(
            f"the config store's epoch file {where} holds {value[:40]!r}, not an integer: refusing to "
            "start, since reading it as 0 would move every follower's epoch back. Restore it from a "
            "backup, or write the highest epoch followers saw (sie_config_epoch) into it."
        )
    return int(value)


class ConfigStore:
    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")
        self._fs, self._base = filesystem(self.location)
        self._swap = swapper(self.location, self._fs, self._base)
        self._fs.makedirs(f"{self._base}/{MODELS_FOLDER}", exist_ok=True)

    def _path(self, *parts: str) -> str:
        return "/".join((self._base, *parts))

    def _where(self, *parts: str) -> str:
        """A path as the operator wrote the location (with its scheme), for messages."""
        return "/".join((self.location, *parts))

    def read_epoch(self) -> int:
        return parse_epoch(self._swap.read(self._path(EPOCH_FILE)), self._where(EPOCH_FILE))

    def advance_epoch(self, seen: int) -> int:
        """``seen`` → ``seen + 1``, only if the store still holds ``seen``; the new epoch."""
        where = self._where(EPOCH_FILE)
        self._swap.swap(self._path(EPOCH_FILE), lambda text: parse_epoch(text, where) == seen, str(seen + 1))
        return seen + 1

    def write_model(self, model_id: str, text: str, *, expected: str | None) -> None:
        """``text`` over ``expected`` (what this writer's registry was built from; None: no file)."""
        self._swap.swap(self._path(MODELS_FOLDER, file_name(model_id)), lambda held: held == expected, text)

    def read_model(self, model_id: str) -> str | None:
        if storable(model_id) is not None:
            return None  # an id the store cannot hold (one of the baked catalogue's) is not in it
        return self._swap.read(self._path(MODELS_FOLDER, file_name(model_id)))

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
        return sorted(model_id_of(f) for f in files if f.endswith(".yaml") and not f.startswith("."))

    def load_all(self) -> dict[str, str]:
        """Every stored model's YAML text, by the id its file name maps to. A file an older release (or
        the public service) wrote for an id another shares the name of (``a_/b``: ``a___b.yaml``) maps
        to one of them; the registry takes it under the id its YAML names (``ConfigRegistry.restore``),
        and new profiles for that id are refused from then on."""
        texts = {}
        for model_id in self.model_ids():
            name = file_name_of(model_id)
            if storable(model_id) is not None:
                log.warning("%s: more than one model ID maps to its name; its YAML's sie_id says whose", name)
            text = self._swap.read(self._path(MODELS_FOLDER, name))
            if text is not None:
                texts[model_id] = text
        return texts
