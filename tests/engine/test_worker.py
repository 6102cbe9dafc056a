"""The worker around real batches when something breaks: no request may hang, none answered twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest

from sie.adapters.batch import Prepared
from sie.core.options import OutputDType
from sie.engine.batcher import BatchLimits
from sie.engine.device_thread import DeviceThread
from sie.engine.engine import Engine
from sie.engine.errors import InferenceFailed
from sie.engine.loader import LoadedModel
from sie.engine.runner import BatchGroup, ModelRunner
from sie.engine.worker import BatchStats, ModelWorker, WorkerLimits
from sie.postprocess.outputs import Postprocess
from sie.postprocess.quantize import l2_normalize, quantize
from tests.engine.test_engine import DENSE_GROUP as GROUP
from tests.engine.test_engine import INT8, make_engine


@pytest.fixture
async def loaded(tmp_path) -> AsyncIterator[tuple[Engine, LoadedModel]]:
    engine = make_engine(tmp_path)
    await engine.preload([INT8])
    model, _ = engine.registry.ready(INT8)
    yield engine, model
    await engine.close()


@pytest.fixture
def executor() -> DeviceThread:
    pool = DeviceThread()
    yield pool
    pool.shutdown()


def start_worker(
    model: LoadedModel, executor: DeviceThread, on_batch: Callable[[BatchStats], None]
) -> ModelWorker:
    limits = BatchLimits(max_tokens=512, max_items=8, max_wait_s=0.0)
    runner = ModelRunner(model.adapter, limits.max_tokens)
    worker = ModelWorker("t", runner, WorkerLimits(limits, 64), executor, on_batch=on_batch)
    worker.start()
    return worker


async def test_a_failed_forward_keeps_its_cause(loaded, executor):
    _, model = loaded
    worker = start_worker(model, executor, lambda stats: None)
    outside_vocabulary = [Prepared(np.array([101, 10**7, 102], dtype=np.int64))]
    (future,) = worker.submit(outside_vocabulary, GROUP)
    with pytest.raises(InferenceFailed, match="Inference failed for model 't'") as failure:
        await asyncio.wait_for(future, 10)
    assert failure.value.__cause__ is not None  # the runtime's own error, for the log and debugging
    assert "InferenceFailed" not in type(failure.value.__cause__).__name__
    await worker.close()


async def test_items_wanting_different_postprocessing_share_one_forward(loaded, executor):
    _, model = loaded
    batches: list[BatchStats] = []
    limits = BatchLimits(max_tokens=512, max_items=8, max_wait_s=0.05)
    worker = ModelWorker(
        "t", ModelRunner(model.adapter, 512), WorkerLimits(limits, 64), executor, on_batch=batches.append
    )
    worker.start()
    int8 = BatchGroup(GROUP.forward, Postprocess(GROUP.post.keep, True, OutputDType.INT8))
    raw = BatchGroup(GROUP.forward, Postprocess(GROUP.post.keep, False, OutputDType.FLOAT32))
    texts = ["the same text", "another text"]
    asked = [
        worker.submit(model.adapter.prepare(texts, group.forward), group) for group in (GROUP, int8, raw)
    ]
    normal, quantised, unnormalised = [await asyncio.gather(*futures) for futures in asked]
    assert [b.items for b in batches] == [6]  # one forward for all three requests
    for a, b, c in zip(normal, quantised, unnormalised, strict=True):
        assert a.outputs.dense.dtype == np.float32 and b.outputs.dense.dtype == np.int8
        np.testing.assert_array_equal(b.outputs.dense, quantize(a.outputs.dense[None], OutputDType.INT8)[0])
        np.testing.assert_allclose(l2_normalize(c.outputs.dense), a.outputs.dense, atol=1e-6)
        assert abs(float(np.linalg.norm(c.outputs.dense)) - 1.0) > 1e-3
    await worker.close()
