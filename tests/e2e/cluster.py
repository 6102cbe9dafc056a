"""Real cluster processes for the end-to-end tests: ``nats-server`` (tests/conftest.py), ``sie-gateway``
and ``sie-server serve`` workers with ``SIE_NATS_URL``, each on free loopback ports with its own log."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import READY_TIMEOUT_S, Server, _free_port, _stop, run_server


def _script(name: str) -> list[str]:
    script = Path(sys.executable).with_name(name)
    found = str(script) if script.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed next to the test interpreter nor on PATH")
    return [found]


def _gateway_command() -> list[str]:
    return _script("sie-gateway")


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
def run_worker(
    log_dir: Path, env: dict[str, str], *args: str, ready_timeout_s: float = READY_TIMEOUT_S
) -> Iterator[Server]:
    log_dir.mkdir(parents=True, exist_ok=True)
    with run_server(log_dir, env, *args, ready_timeout_s=ready_timeout_s) as server:
        yield server


class ConfigService:
    """``sie-config serve`` (ours, or another installation's ``command``) on a fixed free port, so a
    restarted one is found again at the same URL; ``kill`` is SIGKILL, ``start`` waits for ``/readyz``."""

    def __init__(self, log_dir: Path, env: dict[str, str], command: list[str] | None = None) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "sie-config.log"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.command = command or _script("sie-config")
        self.process: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(base_url=self.url, timeout=30.0)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self) -> None:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
        child_env.update({"PYTHONUNBUFFERED": "1", **self.env})
        argv = [*self.command, "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=child_env)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert self.process.poll() is None, f"sie-config exited:\n{self.log()}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            assert time.monotonic() < deadline, f"sie-config never ready:\n{self.log()}"
            time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            _stop(self.process)

    def wait_nats(self, timeout_s: float = 30) -> None:
        """Until a write would be accepted: ours says so on /metrics; a probe POST of nothing tells
        any implementation's 503 ``nats_unavailable`` from its 400 for an empty body."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.client.post(
                "/v1/configs/models", content=b"", headers=self.auth_headers()
            ).status_code
            if status != 503:
                return
            assert time.monotonic() < deadline, f"sie-config never joined NATS:\n{self.log()}"
            time.sleep(0.1)

    def auth_headers(self) -> dict[str, str]:
        token = self.env.get("SIE_ADMIN_TOKEN")
        return {"Authorization": f"Bearer {token}"} if token else {}

    def post(self, text: str, key: str | None = None) -> httpx.Response:
        headers = self.auth_headers() | ({"Idempotency-Key": key} if key else {})
        return self.client.post("/v1/configs/models", content=text.encode(), headers=headers)


@contextlib.contextmanager
def run_config_service(
    log_dir: Path, env: dict[str, str], command: list[str] | None = None
) -> Iterator[ConfigService]:
    service = ConfigService(log_dir, env, command)
    service.start()
    try:
        yield service
    finally:
        service.client.close()
        service.stop()


class TcpProxy:
    """A loopback TCP relay to ``target_port`` that a test can ``cut`` (every connection closed, new
    ones refused) and ``restore`` on the same port: one client's network partition, nobody else's."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = _free_port()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        assert self._listener is not None
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a bare close would not)
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
