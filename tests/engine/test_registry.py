"""The model registry in process, on a custom adapter file (the public ``file.py:Class`` form) that needs no
torch: states, hot reload, eviction under a memory budget, and where models are closed."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from sie.catalog.catalog import Catalog
from sie.catalog.errors import ModelNotFound
from sie.core.options import ComputePrecision
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings, ModelState
from sie.observability.metrics import Metrics
from sie.weights.sources import WeightSources
from sie.wire.requests import EncodeRequest, Item

ADAPTER = textwrap.dedent(
    '''
    import threading
    from pathlib import Path

    import numpy as np

    from sie.adapters.batch import BatchOutputs, Prepared
    from sie.adapters.contract import NO_TRAITS, TEXT_ONLY
    from sie.core.options import Capability


    class Recorder:
        """Dense vectors of a constant ``value`` (a loadtime option); close() writes its thread's name."""

        family = "Recorder"
        capabilities = frozenset({Capability.DENSE})
        inputs = TEXT_ONLY
        request_options = frozenset()
        traits = NO_TRAITS
        dims = {Capability.DENSE: 4}
        packs_tokens = True
        tokenizer = None

        def __init__(self, spec):
            self.value = float(spec.loadtime.get("value", 1.0))
            self.closed_log = spec.weights / "closed_on"

        @classmethod
        def load(cls, spec):
            return cls(spec)

        def prepare(self, inputs, forward):
            return [Prepared(np.arange(len(text.split()) + 1)) for text in inputs]

        def run(self, batch, forward):
            return BatchOutputs(dense=np.full((len(batch), 4), self.value, dtype=np.float32))

        def close(self):
            self.closed_log.write_text(threading.current_thread().name)
    '''
)


def model_yaml(name: str, value: float) -> str:
    return (
        f"sie_id: {name}\nweights_path: weights-{name.split('/')[1]}\ntasks: {{encode: {{dense: {{dim: 4}}}}}}\n"
        "profiles: {default: {max_batch_tokens: 64, adapter_path: 'recorder.py:Recorder', "
        f"adapter_options: {{loadtime: {{value: {value}}}}}}}}}\n"
    )


@pytest.fixture
def models(tmp_path: Path) -> Path:
    (tmp_path / "recorder.py").write_text(ADAPTER)
    for name, size in (("a", 600), ("b", 600)):
        weights = tmp_path / f"weights-{name}"
        weights.mkdir()
        (weights / "weights.bin").write_bytes(b"\0" * size)  # what the memory gauge counts for it
        (tmp_path / f"{name}.yaml").write_text(model_yaml(f"t/{name}", 1.0))
    return tmp_path


def engine_over(models: Path, **limits: object) -> Engine:
    load = LoadSettings(
        "cpu", ComputePrecision.FLOAT32, 1, WeightSources(models / "cache", hf_fallback=False)
    )
    return Engine(Catalog.from_directory(models), load, EngineLimits(8, 1, 64, 1, **limits), Metrics())  # type: ignore[arg-type]


async def dense(engine: Engine, model: str) -> list[float]:
    answer = await engine.encode(model, EncodeRequest([Item(text="a b")]), wait_loaded=True)
    return [float(v) for v in answer.response.items[0].dense.values]


def state(engine: Engine, model: str) -> ModelState:
    return next(s.state for s in engine.slots() if s.entry.name == model)


async def test_models_close_on_the_device_thread(models: Path):
    async with engine_over(models) as engine:
        assert await dense(engine, "t/a") == pytest.approx([0.5] * 4)  # normalised
    assert (models / "weights-a" / "closed_on").read_text().startswith("sie-device")


async def test_hot_reload_adds_changes_and_removes_ids(models: Path):
    async with engine_over(models) as engine:
        await dense(engine, "t/a")
        (models / "weights-c").mkdir()
        (models / "c.yaml").write_text(model_yaml("t/c", 1.0))
        (models / "a.yaml").write_text(model_yaml("t/a", -1.0))  # changed: reloaded with the new config
        (models / "b.yaml").unlink()
        await engine.apply_catalog(Catalog.from_directory(models))
        assert await dense(engine, "t/a") == pytest.approx([-0.5] * 4)
        assert await dense(engine, "t/c") == pytest.approx([0.5] * 4)
        with pytest.raises(ModelNotFound):
            await engine.encode("t/b", EncodeRequest([Item(text="x")]))


async def test_over_the_memory_budget_the_least_recently_used_idle_model_goes(models: Path):
    # Each model's weights count 600 bytes against a budget of 1000: both loaded is 120 %.
    async with engine_over(models, memory_limit_bytes=1000, memory_check_s=0.01) as engine:
        await dense(engine, "t/a")
        await dense(engine, "t/b")  # a is now the least recently used
        for _ in range(500):  # the watcher checks every 10 ms
            if state(engine, "t/a") is ModelState.AVAILABLE:
                break
            await asyncio.sleep(0.01)
        assert state(engine, "t/a") is ModelState.AVAILABLE
        assert state(engine, "t/b") is ModelState.LOADED  # never the only loaded model
        assert (models / "weights-a" / "closed_on").read_text().startswith("sie-device")
