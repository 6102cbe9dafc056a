"""Hot reload of a local models folder: YAMLs added, changed or deleted take effect without a restart.

File events are debounced (a second, as the public server's watcher), then the whole folder is parsed
again and handed to ``Engine.apply_catalog``, which works out what was added, changed or removed. A
folder that no longer parses (a YAML being written, a typo) keeps the models being served and logs
why; the next good save applies.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from watchfiles import awatch

from sie.catalog.catalog import Catalog

log = logging.getLogger(__name__)

DEBOUNCE_MS = 1000


async def watch_models_dir(
    directory: Path, only: list[str] | None, apply: Callable[[Catalog], Awaitable[None]]
) -> None:
    log.info("watching %s for model config changes", directory)
    async for _changes in awatch(directory, debounce=DEBOUNCE_MS, recursive=False):
        try:
            catalog = Catalog.from_directory(directory, only)
        except Exception as exc:
            log.error("models dir %s does not parse; keeping the models being served: %s", directory, exc)
            continue
        try:
            await apply(catalog)
        except Exception:
            log.exception("applying the reloaded models dir %s failed", directory)
