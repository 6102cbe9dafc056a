"""The status pages in a real headless Chromium: the gateway's ``/`` shows a local cluster live (its
workers, pool, models) and updates when a worker joins, without a reload; the standalone server's
``/`` shows its models. The gateway page's screenshot is saved (``$SIE_TEST_ARTIFACTS``, default the
test's temporary folder); docs/operations.md shows one."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import running_nats
from tests.e2e.browser import chromium
from tests.e2e.cluster import run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM, Server


def test_the_gateway_page_shows_the_cluster_live_and_a_worker_joining(tmp_path: Path) -> None:
    artifacts = Path(os.environ.get("SIE_TEST_ARTIFACTS", tmp_path / "artifacts"))
    with running_nats(tmp_path) as nats, chromium(tmp_path / "profile") as browser:
        gateway_env = {"SIE_NATS_URL": nats.url, "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500"}
        with (
            run_gateway(tmp_path / "gateway", gateway_env) as gateway,
            run_worker(tmp_path / "w1", worker_env(nats.url, "worker-1")),
        ):
            gateway.wait_for_workers(1, [MINILM])
            with browser.open(gateway.url) as page:
                shown = page.wait_for_text("live", "worker-1", "healthy", MINILM)
                assert "worker-2" not in shown and "no pool" not in shown
                with run_worker(tmp_path / "w2", worker_env(nats.url, "worker-2")):
                    page.wait_for_text("worker-2")  # the same page, pushed by /ws/cluster-status
                    gateway.wait_for_workers(2, [MINILM])
                    page.wait_for_text("worker-1", "worker-2")
                    assert page.evaluate("document.getElementById('workers').textContent") == "2"
                    assert page.evaluate("document.getElementById('worker-rows').rows.length") == 2
                    page.screenshot(artifacts / "cluster-status.png")
    assert (artifacts / "cluster-status.png").stat().st_size > 10_000


def test_the_servers_page_shows_its_models(tmp_path: Path, server: Server) -> None:
    with chromium(tmp_path / "profile") as browser, browser.open(server.url) as page:
        shown = page.wait_for_text("live", "ready", MINILM, "loaded")
        assert "Models" in shown and "Devices" in shown
