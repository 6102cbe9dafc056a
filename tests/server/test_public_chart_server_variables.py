"""The public chart's worker variables our server answers rather than acts on, and the one it refuses:

- ``SIE_CLUSTER_ROUTING``: ``queue`` (the chart's only value) or unset; any other value, or ``queue``
  without ``SIE_NATS_URL``, refuses the start: a real ``sie-server serve`` exits 1 and says why.
- ``SIE_ADAPTIVE_BATCHING__*``: read (nested, as the public server's settings) and answered with one
  warning naming what was set; our batcher steers no batch wait to a latency target.
- ``SIE_TELEMETRY_URL``: one warning (this server sends no telemetry), unless telemetry is turned off
  (``SIE_TELEMETRY_DISABLED``, ``DO_NOT_TRACK=1``), which is what it already does: then nothing.
"""

from __future__ import annotations

import logging
import os
import subprocess

import pytest

from sie.server.app import create_app
from sie.settings.server import Settings
from tests.e2e.cluster import _script

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def moot_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if ": no effect here; " in r.getMessage()]


def test_another_cluster_routing_refuses_the_start_of_a_real_server() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    env |= {"SIE_CLUSTER_ROUTING": "http", "SIE_NATS_URL": "nats://127.0.0.1:1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [*_script("sie-server"), "serve", "--models", MINILM, "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert (
        "error: SIE_CLUSTER_ROUTING='http': only 'queue' is served (work comes through NATS JetStream, "
        "the gateway's only route to workers); set it to queue or unset it"
    ) in done.stderr


@pytest.mark.parametrize(
    ("routing", "nats_url", "queue"),
    [(None, None, False), (None, "nats://n:4222", True), (" Queue", "nats://n:4222", True)],
)
def test_queue_or_unset_is_the_queue_mode_sie_nats_url_says(
    routing: str | None, nats_url: str | None, queue: bool
) -> None:
    assert Settings(cluster_routing=routing, nats_url=nats_url).queue_mode() is queue


def test_queue_routing_without_nats_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^SIE_CLUSTER_ROUTING=queue needs SIE_NATS_URL"):
        create_app(Settings(cluster_routing="queue", model_filter=MINILM))


def test_adaptive_batching_and_a_telemetry_url_are_answered_once_each(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="sie.server.app"):
        create_app(Settings(model_filter=MINILM))
    assert moot_lines(caplog) == []  # nothing set, nothing said
    monkeypatch.setenv("SIE_ADAPTIVE_BATCHING__ENABLED", "false")
    monkeypatch.setenv("SIE_ADAPTIVE_BATCHING__TARGET_P50_MS", "40")
    monkeypatch.setenv("SIE_TELEMETRY_URL", "https://collector.example/api/telemetry")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sie.server.app"):
        create_app(Settings(model_filter=MINILM))
    assert [(r.levelno, r.name, r.getMessage()) for r in moot_lines(caplog)] == [
        (
            logging.WARNING,
            "sie.server.app",
            "SIE_ADAPTIVE_BATCHING__ENABLED and SIE_ADAPTIVE_BATCHING__TARGET_P50_MS: no effect here; this "
            "server's batcher forms a batch from what has arrived, bounded by tokens and "
            "SIE_MAX_BATCH_WAIT_MS, and steers no batch wait to a latency target",
        ),
        (
            logging.WARNING,
            "sie.server.app",
            "SIE_TELEMETRY_URL: no effect here; this server sends no telemetry, to that URL or any other",
        ),
    ]


@pytest.mark.parametrize(("name", "value"), [("DO_NOT_TRACK", "1"), ("SIE_TELEMETRY_DISABLED", "Yes")])
def test_telemetry_turned_off_is_what_this_server_does_and_says_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str, value: str
) -> None:
    monkeypatch.setenv("SIE_TELEMETRY_URL", "https://collector.example/api/telemetry")
    monkeypatch.setenv("SIE_VARIANT", "cpu-default")
    monkeypatch.setenv("SIE_DATA_DIR", "/var/lib/sie")
    monkeypatch.setenv(name, value)
    settings = Settings(model_filter=MINILM)
    assert (settings.variant, settings.data_dir) == ("cpu-default", "/var/lib/sie")  # read
    with caplog.at_level(logging.INFO, logger="sie.server.app"):
        create_app(settings)
    assert moot_lines(caplog) == []
