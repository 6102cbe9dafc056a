"""Seed 001's queue-mode batching knobs: they govern a queue worker and leave a plain server alone."""

from __future__ import annotations

import pytest

from sie.settings.server import Settings


@pytest.mark.parametrize(
    ("nats_url", "expected"),
    [(None, (64, 10.0)), ("nats://127.0.0.1:4222", (12, 5.0))],
)
def test_the_batcher_knobs_apply_in_queue_mode_only(
    monkeypatch: pytest.MonkeyPatch, nats_url, expected
) -> None:
    monkeypatch.setenv("SIE_BATCHER_MAX_BATCH_REQUESTS", "12")
    monkeypatch.setenv("SIE_BATCHER_COALESCE_MS", "5")
    if nats_url:
        monkeypatch.setenv("SIE_NATS_URL", nats_url)
    settings = Settings()
    assert (settings.batch_items(), settings.batch_wait_ms()) == expected


def test_unset_knobs_keep_the_servers_batching(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIE_NATS_URL", "nats://a:4222, nats://b:4222")
    settings = Settings()
    assert settings.nats_servers() == ["nats://a:4222", "nats://b:4222"]
    assert (settings.batch_items(), settings.batch_wait_ms()) == (64, 10.0)
    assert (settings.max_concurrent_batches, settings.rust_pipeline_depth) == (4, 2)
    assert (settings.health_publish_interval_ms, settings.worker_metrics_port) == (5000, 9095)


async def test_the_pipeline_depth_is_how_many_batches_a_model_has_at_once() -> None:
    from sie.engine.batcher import BatchLimits
    from sie.engine.device_thread import DeviceThread
    from sie.engine.worker import ModelWorker, WorkerLimits
    from tests.engine.fakes import FakeRunner

    limits = BatchLimits(max_tokens=1000, max_items=4, max_wait_s=0)
    with DeviceThread() as executor:
        for depth, waiting in ((2, 1), (3, 2), (1, 1)):
            worker = ModelWorker("m", FakeRunner(), WorkerLimits(limits, 10, depth), executor)
            assert worker._ready.maxsize == waiting  # formed batches waiting beside the one running
