"""Real cluster processes for the end-to-end tests: ``nats-server`` (tests/conftest.py), ``sie-gateway``
and ``sie-server serve`` workers with ``SIE_NATS_URL``, each on free loopback ports with its own log."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Server, _free_port, _stop, run_server

READY_TIMEOUT_S = 60.0


def _gateway_command() -> list[str]:
    script = Path(sys.executable).with_name("sie-gateway")
    found = str(script) if script.exists() else shutil.which("sie-gateway")
    if found is None:
        pytest.fail("sie-gateway is not installed next to the test interpreter nor on PATH")
    return [found]


@dataclass
class Gateway:
    url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=120.0)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> dict[str, Any]:
        response = self.client.get("/health")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def metric(self, name: str, **labels: str) -> float:
        """A sample's value on ``/metrics`` (0 when absent), summed over the labels not given."""
        total = 0.0
        for family in text_string_to_metric_families(self.client.get("/metrics").text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def wait_for_workers(self, count: int, models: list[str], timeout_s: float = 120) -> None:
        """Until ``count`` healthy workers each report every one of ``models`` loaded."""
        deadline = time.monotonic() + timeout_s
        while True:
            workers = [w for w in self.health()["workers"] if w["healthy"]]
            ready = [w for w in workers if set(models) <= set(w["loaded_models"])]
            if len(ready) >= count:
                return
            assert time.monotonic() < deadline, f"workers never ready: {workers}\n{self.log()}"
            time.sleep(0.2)


@contextlib.contextmanager
def run_gateway(log_dir: Path, env: dict[str, str]) -> Iterator[Gateway]:
    """``sie-gateway serve`` on a free port, ready once ``/readyz`` answers 200 (NATS joined)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = log_dir / "gateway.log"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    child_env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **env})
    argv = [*_gateway_command(), "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=child_env)
    gateway = Gateway(url, log_path, process)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert process.poll() is None, f"sie-gateway exited:\n{gateway.log()}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"sie-gateway never ready:\n{gateway.log()}"
            time.sleep(0.1)
        yield gateway
    finally:
        gateway.client.close()
        _stop(process)


def worker_env(nats_url: str, name: str, **extra: str) -> dict[str, str]:
    """A queue worker's environment: its id, a free probe port, heartbeats every 0.5 s."""
    return {
        "SIE_NATS_URL": nats_url,
        "SIE_WORKER_ID": name,
        "SIE_WORKER_METRICS_PORT": str(_free_port()),
        "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
        "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
        **extra,
    }


@contextlib.contextmanager
def run_worker(log_dir: Path, env: dict[str, str], *args: str) -> Iterator[Server]:
    log_dir.mkdir(parents=True, exist_ok=True)
    with run_server(log_dir, env, *args) as server:
        yield server
