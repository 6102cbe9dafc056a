"""The whole cluster across hosts: three NATS nodes (streams, bucket and dead letters at three
replicas, each role with its own credentials), sie-config, two gateways and two or more workers,
each on its own namespace host, and a host for the load client. ``Topology`` starts it, knows every
process (to kill, restart, starve, cut off) and stops it; ``scripts/chaos`` and tests/chaos share it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from bench.procs import ManagedProcess, rss_mb
from chaos import models
from chaos.disk import SmallDisk, full_disk
from chaos.hosts import Host, Network
from chaos.nats_cluster import NatsCluster, NatsNode

HTTP_PORT: Final = 8080
PROBE_PORT: Final = 9090
READY_S: Final = 180.0
REPLICAS: Final = 3
# The first worker's weight cache is a disk of its own, so a fault can fill it (chaos.disk).
CACHE_DISK_BYTES: Final = 512 * 1024 * 1024
SERVED: Final = (models.ENCODER, models.RERANKER, models.EXTRACTOR)


def script(name: str) -> str:
    """A console script of this checkout's venv (beside the interpreter), else PATH's."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed next to {sys.executable} nor on PATH")
    return found


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    env.update(
        {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        | {"PYTHONUNBUFFERED": "1"}
    )
    return env


@dataclass
class Service:
    """One cluster process on its host: started, probed, SIGKILLed and started again as itself."""

    name: str
    host: Host
    command: list[str]
    env: dict[str, str]
    folder: Path
    ready_path: str = "/readyz"
    process: ManagedProcess | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.host.address}:{HTTP_PORT}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.exit_code() is None

    def start(self) -> None:
        self.starts += 1
        argv = self.host.argv(self.command)
        log = self.folder / f"{self.name}.{self.starts}.log"
        self.process = ManagedProcess(self.name, argv, self.env, log)
        self.process.start()

    def wait_ready(self, timeout_s: float = READY_S) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                assert self.process is not None
                if self.process.exit_code() is not None:
                    raise RuntimeError(f"{self.name} exited:\n{self.process.log_tail(40)}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.url + self.ready_path).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.name} not ready in {timeout_s:g} s:\n{self.process.log_tail(40)}"
                    )
                time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL of the whole process: no drain, no goodbye."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.stop(grace_s=1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_s=20)

    def rss_mb(self) -> float:
        return rss_mb(self.pid) if self.alive() else 0.0

    def logs(self) -> str:
        return "\n".join(
            path.read_text(errors="replace") for path in sorted(self.folder.glob(f"{self.name}.*.log"))
        )


@dataclass
class Topology:
    root: Path
    workers: int = 2
    network: Network = field(default_factory=Network)
    nats: NatsCluster | None = None
    config: Service | None = None
    gateways: list[Service] = field(default_factory=list)
    worker_services: list[Service] = field(default_factory=list)
    client: Host | None = None
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    models_dir: Path | None = None
    disks: dict[str, SmallDisk] = field(default_factory=dict)  # worker -> its weight cache's disk
    _mounts: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def cluster_cache(self) -> Path:
        """The shared weight cache (``SIE_CLUSTER_CACHE``, a folder in the hub layout) every worker
        copies a model from when its own cache lacks it."""
        return self.root / "cluster-cache"

    def start(self) -> None:
        """Everything up, each worker serving every model and known to both gateways."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.models_dir = models.build(self.root)
        self.cluster_cache.mkdir(exist_ok=True)
        self.network.open()
        net = self.network
        nodes = [NatsNode(f"n{i}", net.add(f"n{i}"), self.root / f"n{i}") for i in (1, 2, 3)]
        self.nats = NatsCluster(nodes)
        self.nats.start()
        self.config = self._service(
            "config", net.add("cfg"), [script("sie-config"), "serve"], self._config_env()
        )
        self.config.start()
        self.config.wait_ready()
        for i in (1, 2):
            gateway = self._service(
                f"g{i}", net.add(f"g{i}"), [script("sie-gateway"), "serve"], self._gateway_env()
            )
            self.gateways.append(gateway)
        for i in range(1, self.workers + 1):
            self.worker_services.append(self.add_worker(f"w{i}", start=False))
        self.client = net.add("client")
        for service in [*self.gateways, *self.worker_services]:
            service.start()
        for service in [*self.gateways, *self.worker_services]:
            service.wait_ready()
        for gateway in self.gateways:
            self.wait_for_workers(gateway, len(self.worker_services))

    def add_worker(self, name: str, start: bool = True, **extra_env: str) -> Service:
        host = self.network.add(name)
        cache = self.root / name / "cache"
        if not self.disks:  # mounted before the worker starts: its mount namespace is made then
            self.disks[name] = self._mounts.enter_context(full_disk(cache, CACHE_DISK_BYTES))
        command = [script("sie-server"), "serve", "--preload", ",".join(SERVED)]
        env = self._worker_env(name) | {"SIE_LOCAL_CACHE": str(cache)} | extra_env
        worker = self._service(name, host, command, env)
        if start:
            worker.start()
            worker.wait_ready()
        return worker

    def _service(self, name: str, host: Host, command: list[str], env: dict[str, str]) -> Service:
        listen = ["--host", host.address, "--port", str(HTTP_PORT)]
        return Service(name, host, [*command, *listen], env, self.root / name)

    def _shared_env(self) -> dict[str, str]:
        assert self.models_dir is not None
        return base_env() | {
            "SIE_MODELS_DIR": str(self.models_dir),
            "SIE_STREAM_REPLICAS": str(REPLICAS),
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
        }

    def _config_env(self) -> dict[str, str]:
        assert self.nats is not None
        return (
            self._shared_env()
            | self.nats.access("config")
            | {
                "SIE_CONFIG_STORE_DIR": str(self.root / "config-store"),
                "SIE_CONFIG_RESTORE": "true",
                "SIE_ADMIN_TOKEN": self.admin_token,
                "POD_NAME": "sie-config-0",
            }
        )

    def _follow_env(self) -> dict[str, str]:
        assert self.config is not None
        return {"SIE_CONFIG_SERVICE_URL": self.config.url, "SIE_ADMIN_TOKEN": self.admin_token}

    def _gateway_env(self) -> dict[str, str]:
        assert self.nats is not None
        return (
            self._shared_env()
            | self.nats.access("gateway")
            | self._follow_env()
            | {"SIE_GATEWAY_REQUEST_TIMEOUT": "90"}
        )

    def _worker_env(self, name: str) -> dict[str, str]:
        assert self.nats is not None
        return (
            self._shared_env()
            | self.nats.access("worker")
            | self._follow_env()
            | {
                "SIE_WORKER_ID": name,
                "SIE_CLUSTER_CACHE": str(self.cluster_cache),
                "SIE_HF_FALLBACK": "false",
                "SIE_WORKER_METRICS_PORT": str(PROBE_PORT),
                "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
            }
        )

    def wait_for_workers(self, gateway: Service, count: int, timeout_s: float = READY_S) -> None:
        """Until ``gateway`` sees ``count`` healthy workers with every served model loaded."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=5.0) as client:
            while True:
                ready: list[Any] = []
                with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                    workers = client.get(gateway.url + "/health").json()["workers"]
                    ready = [w for w in workers if w["healthy"] and set(SERVED) <= set(w["loaded_models"])]
                if len(ready) >= count:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{gateway.name} sees {len(ready)} ready workers of {count}")
                time.sleep(0.25)

    @property
    def services(self) -> list[Service]:
        return [s for s in (self.config, *self.gateways, *self.worker_services) if s is not None]

    def worker(self, name: str) -> Service:
        return next(w for w in self.worker_services if w.name == name)

    def close(self) -> None:
        for service in reversed(self.services):
            service.stop()
        if self.nats is not None:
            self.nats.stop()
        self._mounts.close()
        self.network.close()


@contextlib.contextmanager
def topology(root: Path, workers: int = 2) -> Iterator[Topology]:
    top = Topology(root, workers)
    try:
        top.start()
        yield top
    finally:
        top.close()
