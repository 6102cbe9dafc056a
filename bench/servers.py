"""How each server under test is started: our ``sie-server`` and Infinity, both offline on loopback.

A ``Server`` is ready when its model answers; its idle RSS is read right then, before any request.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import procs

SIE_JSON_ROUTE = "/v1/embeddings"
INFINITY_JSON_ROUTE = "/embeddings"
_LOADED = re.compile(r"loaded (\S+) from .* on (\S+) \((\w+)\)")


@dataclass
class Server:
    name: str  # "sie", "sie with KEY=VALUE" (--compare-env) or "infinity"
    process: procs.ManagedProcess
    base_url: str
    model: str  # the id requests name
    json_route: str
    startup_s: float = 0.0
    idle_rss_mb: float = 0.0
    effective_precision: str | None = None  # what the server's log says it loaded the model as
    speaks_msgpack: bool = False  # ours: measured through the SDK
    notes: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.stop()


def offline_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a process the bench starts: this shell's without any ``SIE_*`` (a run must
    not inherit a developer's settings), offline for the Hub, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    env.update(extra)
    return env


def ready(server: Server, timeout_s: float, probe_path: str) -> Server:
    def probe(client: httpx.Client) -> bool:
        return client.get(server.base_url + probe_path).status_code == 200

    server.startup_s = procs.wait_ready(server.process, probe, timeout_s)
    server.idle_rss_mb = procs.rss_mb(server.pid)
    return server


def start_sie(
    model: str,
    precision: str,
    server_env: dict[str, str],
    log_dir: Path,
    server_src: Path | None = None,
    timeout_s: float = 300.0,
    *,
    device: str | None = None,
    models_dir: Path | None = None,
    log_name: str = "sie-server.log",
    cpus: list[int] | None = None,
) -> Server:
    """``python -m sie.server serve --preload MODEL``: preload happens before the port opens, so ready
    means loaded. The server runs on this interpreter (``sys.executable``), so it works from a
    virtualenv and from a bare ``python3`` whose PYTHONPATH holds the dependencies (a GPU machine)."""
    port = procs.free_port()
    env = offline_env({"SIE_DEFAULT_COMPUTE_PRECISION": precision, **server_env})
    if server_src is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(server_src), env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "sie.server", "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--preload", model]
    if cpus is not None:  # taskset execs the server: the pid stays the server's
        argv = ["taskset", "-c", ",".join(map(str, cpus)), *argv]
    if device is not None:
        argv += ["--device", device]
    if models_dir is not None:
        argv += ["--models-dir", str(models_dir)]
    process = procs.ManagedProcess("sie-server", argv, env, log_dir / log_name)
    server = Server("sie", process, f"http://127.0.0.1:{port}", model, SIE_JSON_ROUTE, speaks_msgpack=True)
    process.start()
    ready(server, timeout_s, f"/v1/models/{model}")
    match = _LOADED.search(process.log_path.read_text(errors="replace"))
    if match:
        server.effective_precision = match.group(3)
        server.notes.append(f"loaded on {match.group(2)} as {match.group(3)}")
    given = " ".join(f"{k}={v}" for k, v in sorted({**server_env}.items()))
    server.notes.append(f"SIE_DEFAULT_COMPUTE_PRECISION={precision} {given}".strip())
    return server


def start_infinity(
    cli: Path,
    folder: Path,
    model: str,
    batch_size: int,
    dtype: str,
    log_dir: Path,
    extra_args: list[str],
    timeout_s: float = 300.0,
) -> Server:
    """``infinity_emb v2`` on the torch engine, CPU, offline; its disk cache of results is off (a cache
    would answer the round-robin corpus from SQLite instead of the model)."""
    port = procs.free_port()
    env = offline_env({"DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "NO_COLOR": "1"})
    argv = [
        str(cli),
        "v2",
        "--model-id",
        str(folder),
        "--served-model-name",
        model,
        "--engine",
        "torch",
        "--device",
        "cpu",
        "--dtype",
        dtype,
        "--batch-size",
        str(batch_size),
        "--no-vector-disk-cache",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra_args,
    ]
    process = procs.ManagedProcess("infinity", argv, env, log_dir / "infinity.log")
    server = Server("infinity", process, f"http://127.0.0.1:{port}", model, INFINITY_JSON_ROUTE)
    process.start()
    ready(server, timeout_s, "/models")
    server.notes.append(
        f"infinity_emb v2 --engine torch --device cpu --dtype {dtype} --batch-size {batch_size} "
        f"--no-vector-disk-cache {' '.join(extra_args)}".strip()
    )
    return server
