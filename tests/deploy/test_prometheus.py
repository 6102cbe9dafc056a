"""The alert rules through the real ``promtool`` (check and unit tests), and the chart's KEDA trigger
query run by a real Prometheus against a real gateway that answers 202 (no worker): the query scale
from zero depends on returns the pending demand."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import REPO, running_nats
from tests.deploy.chart import GPU_VALUES, one, render
from tests.e2e.cluster import Gateway, run_gateway
from tests.e2e.conftest import MINILM, _free_port

RULES = REPO / "deploy" / "helm" / "sie-cluster" / "files" / "alerts.yaml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "alerts_test.yaml"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(
            f"{name} not found (Debian package prometheus; scripts/test installs it where apt allows)"
        )
    return found


def test_promtool_checks_the_rules_and_every_alert_passes_its_unit_tests() -> None:
    promtool = tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 10 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    covered = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert covered == alerts  # every alert has a case where it fires


@contextlib.contextmanager
def running_prometheus(folder: Path, targets: dict[str, str]) -> Iterator[str]:
    """``prometheus`` scraping ``targets`` (job -> host:port) every second; yields its URL."""
    binary = tool("prometheus")
    port = _free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [t]}]} for job, t in targets.items()
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = folder / "prometheus.log"
    argv = [
        binary,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


def query(prometheus: str, expression: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expression}, timeout=10).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def test_the_keda_trigger_query_returns_the_pending_demand_of_a_gateway_with_no_worker(
    tmp_path: Path,
) -> None:
    scaled = one(render(values_file=GPU_VALUES), "ScaledObject", "sie-sie-cluster-worker-l4")
    triggers = {t["name"]: t["metadata"]["query"] for t in scaled["spec"]["triggers"]}
    with running_nats(tmp_path) as nats:
        env = {"SIE_NATS_URL": nats.url, "SIE_GATEWAY_CONFIGURED_GPUS": "l4"}
        with run_gateway(tmp_path / "gateway", env) as gateway:
            target = gateway.url.removeprefix("http://")
            with running_prometheus(tmp_path, {"sie-gateway": target}) as prometheus:
                assert [r["value"][1] for r in query(prometheus, triggers["pending-demand"])] == ["0"]
                answer = ask_for_l4(gateway)
                assert answer.status_code == 202, answer.text
                deadline = time.monotonic() + 30
                while [r["value"][1] for r in query(prometheus, triggers["pending-demand"])] != ["1"]:
                    assert time.monotonic() < deadline, query(prometheus, "sie_gateway_pending_demand")
                    time.sleep(0.5)
                # the other triggers' queries are valid PromQL on the same data
                for name in ("queue-depth", "leased-gpus"):
                    assert [r["value"][1] for r in query(prometheus, triggers[name])] == ["0"]


def ask_for_l4(gateway: Gateway) -> httpx.Response:
    return gateway.client.post(
        f"/v1/encode/{MINILM}",
        json={"items": [{"text": "scale me from zero"}]},
        headers={"X-SIE-MACHINE-PROFILE": "l4", "accept": "application/json"},
    )
