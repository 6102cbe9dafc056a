"""Hot reload of local config folders: YAMLs added, changed or deleted take effect without a restart.

File events are debounced (a second, as the public server's and gateway's watchers), then the folders
are parsed again (``load``) and handed to ``apply``: the server's engine works out which models were
added, changed or removed, a gateway swaps its catalogue and bundles. Folders that no longer parse (a
YAML being written, a typo) keep what is being served and log why; the next good save applies.
``polling`` polls the folders instead of asking the kernel for events: for volumes whose changes
raise no events (some network and container filesystems).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from watchfiles import awatch

log = logging.getLogger(__name__)

DEBOUNCE_MS = 1000
T = TypeVar("T")


async def watch_folders(
    folders: Sequence[Path],
    load: Callable[[], T],
    apply: Callable[[T], Awaitable[None]],
    polling: bool = False,
) -> None:
    where = ", ".join(str(folder) for folder in folders)
    log.info("watching %s for config changes%s", where, " (polling)" if polling else "")
    async for _changes in awatch(*folders, debounce=DEBOUNCE_MS, recursive=False, force_polling=polling):
        try:
            loaded = load()
        except Exception as exc:
            log.error("%s does not parse; keeping the models being served: %s", where, exc)
            continue
        try:
            await apply(loaded)
        except Exception:
            log.exception("applying the reloaded %s failed", where)
