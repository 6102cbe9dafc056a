"""Why a model failed to load, and whether and when to try again.

The class decides the retry: a missing model, a missing dependency, a bad configuration or corrupt
weights fail the same way every time, so they stay failed until the config or the files change (hot
reload) or the server restarts; out of memory, the network, a full disk or an unknown error may heal,
so they are retried after a cooldown that doubles with each failed attempt (capped), and become
permanent once they have failed ``MAX_TRANSIENT_ATTEMPTS`` times; a full disk never does (an operator
may free space at any time, and the load is tried again as soon as the room is there:
``loader.can_retry``). The names are the public server's, plus ``CORRUPT`` for weights that cannot be
read (a truncated safetensors file) and ``STORAGE`` for a full disk.

A client is told the class and its generic text (``told``), never the exception: a loader's text names
local folders, cache paths, bucket URLs and Hub errors. The log keeps the exception.
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

import torch
from safetensors import SafetensorError

from sie.adapters.loading import UnknownAdapter
from sie.catalog.model_config import ModelConfigError
from sie.weights.errors import DiskFull
from sie.weights.sources import WeightsNotFound


class LoadErrorClass(StrEnum):
    NOT_FOUND = "NOT_FOUND"
    DEPENDENCY = "DEPENDENCY"
    CONFIG = "CONFIG"
    CORRUPT = "CORRUPT"
    OOM = "OOM"
    NETWORK = "NETWORK"
    STORAGE = "STORAGE"
    UNKNOWN = "UNKNOWN"


PERMANENT: Final = frozenset(
    {LoadErrorClass.NOT_FOUND, LoadErrorClass.DEPENDENCY, LoadErrorClass.CONFIG, LoadErrorClass.CORRUPT}
)
BASE_COOLDOWN_S: Final = {
    LoadErrorClass.OOM: 60.0,
    LoadErrorClass.NETWORK: 30.0,
    LoadErrorClass.STORAGE: 60.0,
    LoadErrorClass.UNKNOWN: 600.0,
}
MAX_COOLDOWN_S: Final = 1800.0
MAX_TRANSIENT_ATTEMPTS: Final = 8

# What a client is told of each class (a model's or a LoRA's weights alike).
PUBLIC_REASONS: Final = {
    LoadErrorClass.NOT_FOUND: "its weights are in none of the places this server is configured to look",
    LoadErrorClass.DEPENDENCY: "a library it needs is not installed",
    LoadErrorClass.CONFIG: "its configuration does not fit its weights or its adapter",
    LoadErrorClass.CORRUPT: "its weight files are corrupt or incomplete",
    LoadErrorClass.OOM: "the device ran out of memory",
    LoadErrorClass.NETWORK: "a source of its weights could not be reached",
    LoadErrorClass.STORAGE: "the disk is full",
    LoadErrorClass.UNKNOWN: "an unexpected error",
}


def told(error_class: LoadErrorClass, remedy: str | None = None) -> str:
    """The reason a client reads (after ``failed to load (<class>): ``): generic, pointing to the log,
    with the command that fixes it when there is one that names nothing of the server's."""
    fix = f" To fix it: {remedy}." if remedy else ""
    return f"{PUBLIC_REASONS[error_class]}.{fix} The server's log has the detail."


def remedy_of(exc: BaseException) -> str | None:
    """The first operator's remedy along ``exc``'s cause chain (``WeightsNotFound.remedy``)."""
    return next(
        (link.remedy for link in _chain(exc) if isinstance(link, WeightsNotFound) and link.remedy), None
    )


def room_of(exc: BaseException) -> tuple[Path, int] | None:
    """The folder and bytes of the first ``DiskFull`` along ``exc``'s cause chain: where to look for
    the room a failed load lacked."""
    full = next((link for link in _chain(exc) if isinstance(link, DiskFull)), None)
    return (full.root, full.needed_bytes) if full is not None else None


_CORRUPT_MESSAGES: Final = (
    "incomplete metadata",
    "header too large",
    "headertoolarge",
    "invalid header",
    "file too small",
    "unexpected end",
    "error while deserializing",
    "invalid load key",
)


@dataclass(frozen=True)
class LoadFailureClass:
    error_class: LoadErrorClass
    permanent: bool
    cooldown_s: float  # 0 when permanent


def classify(exc: BaseException, attempts: int) -> LoadFailureClass:
    """The class of the first link of ``exc``'s cause chain that says what went wrong."""
    links = list(_chain(exc))
    found = next((c for c in map(_classify_one, links) if c is not None), None)
    if found is None:  # a ValueError left unexplained is the model's configuration (public rule)
        value_error = any(isinstance(link, ValueError) for link in links)
        found = LoadErrorClass.CONFIG if value_error else LoadErrorClass.UNKNOWN
    if found in PERMANENT or (attempts >= MAX_TRANSIENT_ATTEMPTS and found is not LoadErrorClass.STORAGE):
        return LoadFailureClass(found, True, 0.0)
    cooldown = min(BASE_COOLDOWN_S[found] * 2 ** (attempts - 1), MAX_COOLDOWN_S)
    return LoadFailureClass(found, False, cooldown)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _classify_one(exc: BaseException) -> LoadErrorClass | None:
    if isinstance(exc, WeightsNotFound):
        return LoadErrorClass.NOT_FOUND
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return LoadErrorClass.OOM
    if isinstance(exc, ModuleNotFoundError | ImportError):
        return LoadErrorClass.DEPENDENCY
    if isinstance(exc, UnknownAdapter):  # a module that is not installed, or a name that is wrong
        return LoadErrorClass.DEPENDENCY if isinstance(exc.__cause__, ImportError) else LoadErrorClass.CONFIG
    if isinstance(exc, ModelConfigError):
        return LoadErrorClass.CONFIG
    if isinstance(exc, SafetensorError | json.JSONDecodeError | EOFError):
        return LoadErrorClass.CORRUPT
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror):
        return LoadErrorClass.NETWORK
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return LoadErrorClass.STORAGE
    message = str(exc).lower()
    if "out of memory" in message or "can't allocate memory" in message:
        return LoadErrorClass.OOM
    if any(part in message for part in _CORRUPT_MESSAGES):
        return LoadErrorClass.CORRUPT
    return None
