"""Why no weights could be had, one type per cure (see ``docs/weights.md``).

- ``WeightsNotFound``: every tier answered and none holds the model (or the Hub said it does not
  exist). Retrying does not help until an operator copies, installs or allows something: permanent,
  the load-failure class ``NOT_FOUND``.
- ``WeightsUnavailable``: at least one tier could not be asked (the cluster store or the Hub was
  unreachable, timed out, refused the credentials, or a copy broke off) and no tier had the files. It
  may heal by itself: the load-failure class ``NETWORK``, retried after a cooldown. It derives from
  ``ConnectionError`` so a classifier that knows only the standard types gets it right too.

Both messages name every tier tried, in order, and why each gave nothing. They are for the operator's
log: a client is told the load-failure class and a generic text (``engine.load_errors``).

``TooLarge`` is one tier's refusal, not a miss: the files are there but over the cap a fetch may take
(``WeightSources.max_fetch_bytes``, the LoRAs' ``SIE_LORA_MAX_BYTES``); the resolve records it and goes
on to the next tier.

``DiskFull`` ends the resolve: the files are there, but the local cache's disk has no room for them
even after the least recently used models went, so no later tier (which writes to the same disk) can
help. It is an ``OSError`` with ``ENOSPC``, the load-failure class ``STORAGE``: it may heal (the operator
frees space, a model stops being in use), and ``has_room`` on its ``root`` and ``needed_bytes`` tells
when, without waiting out a cooldown.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path


class WeightsNotFound(LookupError):
    """No tier holds the model's files; the message lists what was tried. ``remedy`` is what an
    operator can run to fix it when that names nothing of the server's (no path, cache or bucket): a
    client is told it, since it is the one thing worth telling."""

    def __init__(self, message: str, remedy: str | None = None) -> None:
        super().__init__(message)
        self.remedy = remedy


class WeightsUnavailable(ConnectionError):
    """A tier that might hold the files could not be reached; the message lists what was tried."""


class TooLarge(Exception):
    """A copy or download was refused before it started: its files are over the fetch cap."""


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is the filesystem's ENOSPC (or EDQUOT: a
    quota is a full disk to its user). Libraries wrap it (fsspec, huggingface_hub)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        current = current.__cause__ or current.__context__
    return False


class DiskFull(OSError):
    """No room in the local cache for a fetch of ``needed_bytes``; the message names the disk (its
    mount point), what is free and what was evicted first."""

    def __init__(self, message: str, root: Path, needed_bytes: int) -> None:
        super().__init__(errno.ENOSPC, message)
        self.root = root
        self.needed_bytes = needed_bytes

    def __str__(self) -> str:
        return str(self.strerror)


def has_room(folder: Path, needed_bytes: int) -> bool:
    """Whether the disk of ``folder`` has ``needed_bytes`` free now (one ``statvfs``)."""
    try:
        return shutil.disk_usage(folder).free >= needed_bytes
    except OSError:  # the folder went away with its disk: nothing to tell
        return False
