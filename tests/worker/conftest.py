"""The engine the queue tests feed: the shipped catalogue, all-MiniLM-L6-v2 preloaded, float32."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sie.catalog.catalog import Catalog
from sie.core.options import ComputePrecision
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings
from sie.observability.metrics import Metrics
from sie.weights.sources import WeightSources
from tests.conftest import MODELS_DIR

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 2, WeightSources(tmp_path, hf_fallback=False))
    async with Engine(
        Catalog.from_directory(MODELS_DIR), load, EngineLimits(64, 5, 4096, 1), Metrics()
    ) as running:
        await running.preload([MINILM])
        yield running
