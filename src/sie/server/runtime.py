"""One engine's life from settings to shutdown, the same for every process that serves models: the HTTP
server's lifespan, the queue worker, the bench.

Start: build the engine (devices, weight tiers, limits; ``build.build_engine``) → start its background
work → preload → watch a local models dir for hot reload. Stop: stop watching, then close the engine
(fail whatever is still queued, unload models on the device thread). Draining the requests in flight
before that is the front end's job (HTTP: ``server.lifecycle``), since only it knows what "in flight"
means for its transport.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import TracebackType

from sie.catalog.bundles import load_bundle
from sie.catalog.catalog import Catalog
from sie.catalog.hot_reload import watch_folders
from sie.catalog.model_config import ModelConfig
from sie.engine.engine import Engine
from sie.observability.metrics import Metrics
from sie.server.build import build_catalog, build_device, build_engine, select
from sie.settings.server import Settings
from sie.weights.remote_fs import is_remote


class EngineRuntime:
    """``async with EngineRuntime(settings) as engine``. The catalogue is parsed on construction, so a
    bad YAML, bundle or preload id fails before anything starts."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.catalog, self.preload = build_catalog(settings)
        self.device = build_device(settings)  # a missing device stops startup here too
        self._bundle = load_bundle(settings.bundle, settings.bundles_dir) if settings.bundle else None
        self._local = self.catalog  # the models dir as last read (startup, then hot reload)
        self._overlay: dict[str, ModelConfig] = {}  # sie-config's models (``control.follower``)
        self._serving = asyncio.Lock()
        self._engine: Engine | None = None
        self._reload: asyncio.Task[None] | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("the runtime has not started")
        return self._engine

    async def start(self) -> Engine:
        engine = self._engine = build_engine(self.settings, self.catalog, self.metrics, self.device)
        engine.start()
        await engine.preload(self.preload)
        directory = self._local_models_dir()
        if self.settings.hot_reload and directory is not None:
            only = self.settings.filter_list()
            watched = only + self.settings.extra_list() if only else None
            reload = watch_folders(
                [directory], lambda: Catalog.from_directory(directory, watched), self._apply
            )
            self._reload = asyncio.create_task(reload)
        return engine

    async def _apply(self, reloaded: Catalog) -> None:
        """Hot reload serves the same bundle's models as startup did."""
        self._local = reloaded
        await self._serve()

    async def apply_overlay(self, configs: dict[str, ModelConfig]) -> None:
        """Serve sie-config's models on top of the models dir: a model it holds replaces the local
        YAML of the same id; relative weight paths resolve against the local models dir."""
        self._overlay = configs
        await self._serve()

    async def _serve(self) -> None:
        async with self._serving:
            folder = self._local_models_dir() or Path.cwd()
            catalog = self._local.overlaid((config, folder) for config in self._overlay.values())
            await self.engine.apply_catalog(select(catalog, self._bundle, self.settings.extra_list()))

    def _local_models_dir(self) -> Path | None:
        if is_remote(self.settings.models_dir):
            return None
        directory = Path(self.settings.models_dir).expanduser()
        return directory if directory.is_dir() else None

    async def stop(self) -> None:
        if self._reload is not None:
            self._reload.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload
        if self._engine is not None:
            await self._engine.close()

    async def __aenter__(self) -> Engine:
        return await self.start()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()
