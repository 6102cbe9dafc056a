"""Every PromQL expression of the Grafana dashboards, run by a real Prometheus that scraped a local
cluster under load (sie-config, a gateway and two queue workers: the gateway's and sie-config's
``/metrics`` and the workers' probe ports, as the chart's ServiceMonitors scrape them), returns data."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import running_nats
from tests.deploy.chart import CHART
from tests.deploy.test_prometheus import query, running_prometheus
from tests.e2e.cluster import run_config_service, run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM
from tests.e2e.test_control_plane import model_yaml

DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))


def expressions() -> list[tuple[str, str, str]]:
    found = []
    for path in DASHBOARDS:
        board: dict[str, Any] = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                found.append((path.stem, panel["title"], target["expr"]))
    return found


def test_the_four_dashboards_are_there() -> None:
    assert [p.stem for p in DASHBOARDS] == [
        "cluster-overview",
        "model-performance",
        "queue-routing",
        "worker-health",
    ]
    assert len(expressions()) >= 20


def test_every_dashboard_query_returns_data_from_a_real_scrape_of_a_cluster_under_load(
    tmp_path: Path, minilm_dir: Path
) -> None:
    with running_nats(tmp_path) as nats:
        config_env = {
            "SIE_NATS_URL": nats.url,
            "SIE_CONFIG_STORE_DIR": str(tmp_path / "store"),
            "POD_NAME": "sie-config-0",
        }
        with run_config_service(tmp_path / "config", config_env) as config:
            config.wait_nats()
            follow = {"SIE_CONFIG_SERVICE_URL": config.url}
            workers = [{**worker_env(nats.url, name), **follow} for name in ("w1", "w2")]
            gateway_env = {"SIE_NATS_URL": nats.url, "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500", **follow}
            with (
                run_worker(tmp_path / "w1", workers[0]),
                run_worker(tmp_path / "w2", workers[1]),
                run_gateway(tmp_path / "gateway", gateway_env) as gateway,
            ):
                gateway.wait_for_workers(2, [MINILM])
                targets = {
                    "sie-gateway": gateway.url.removeprefix("http://"),
                    "sie-config": config.url.removeprefix("http://"),
                    **{
                        f"sie-worker-{w['SIE_WORKER_ID']}": f"127.0.0.1:{w['SIE_WORKER_METRICS_PORT']}"
                        for w in workers
                    },
                }
                with running_prometheus(tmp_path, targets) as prometheus:
                    load(gateway.url, config, minilm_dir)
                    missing = wait_for_data(prometheus, expressions(), timeout_s=60)
    assert not missing, "dashboard queries without data:\n" + "\n".join(missing)


def load(url: str, config: Any, minilm_dir: Path) -> None:
    """Encodes through the gateway for ~10 s from four threads, one request for a lane no worker serves
    (202, pending demand), and a model config posted to sie-config (epoch, store write, delta)."""
    posted = config.post(model_yaml("tests/dash", minilm_dir))
    assert posted.status_code == 201, posted.text
    deadline = time.monotonic() + 10

    def encode(thread: int) -> int:
        done = 0
        with httpx.Client(base_url=url, timeout=60) as client:
            while time.monotonic() < deadline:
                body = {
                    "items": [
                        {"text": f"load {thread} {done} " * (1 + done % 7)} for _ in range(1 + done % 4)
                    ]
                }
                assert client.post(f"/v1/encode/{MINILM}", json=body).status_code == 200
                done += 1
        return done

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(encode, range(4))) > 20
    waiting = httpx.post(
        f"{url}/v1/encode/{MINILM}",
        json={"items": [{"text": "x"}]},
        headers={"X-SIE-MACHINE-PROFILE": "l4"},
        timeout=30,
    )
    assert waiting.status_code == 202, waiting.text


def wait_for_data(prometheus: str, queries: list[tuple[str, str, str]], timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [
            f"{board} / {title}: {expr}" for board, title, expr in queries if not query(prometheus, expr)
        ]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(1)
