"""Real ``sie-server`` processes for the end-to-end tests: nothing here is mocked.

``server`` is one process for the whole session (the default model preloaded, a deep queue so the
concurrency test is never refused). ``small_server`` is a second process with tight limits (queue of 8
items, 1 MiB bodies, 64 KiB item texts) for the limit tests, and ``single_model_server`` one that serves
the default model alone (for the OpenAPI fuzzer); each lives only as long as the module that asks for
it. Both listen on a free loopback port, run with ``HF_HUB_OFFLINE=1`` and log to a file that
is printed when the process fails to become ready.

Responses are decoded here with plain ``msgpack`` and numpy, not with the server's own codec, so a
codec bug cannot hide itself. Tests get the helpers as fixtures (``unpack``, ``cosine``) rather than by
importing this file, which works under every pytest import mode.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE = f"/v1/encode/{MODEL}"
DIMS = 384
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
MSGPACK_HEADERS = {"content-type": "application/msgpack", "accept": "application/msgpack"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_command() -> list[str]:
    script = Path(sys.executable).with_name("sie-server")
    if script.exists():
        return [str(script)]
    found = shutil.which("sie-server")
    if found is None:
        pytest.fail("sie-server is not installed next to the test interpreter nor on PATH")
    return [found]


def _array_hook(value: dict[Any, Any]) -> Any:
    """msgpack-numpy maps (bin keys, as the public SDK insists) become numpy arrays."""
    if b"nd" in value and value[b"nd"] is True:
        dtype = np.dtype(value[b"type"])
        return np.frombuffer(value[b"data"], dtype=dtype).reshape(value[b"shape"])
    return value


def unpack_body(raw: bytes) -> Any:
    """A msgpack response body with its arrays rebuilt."""
    return msgpack.unpackb(raw, raw=False, object_hook=_array_hook)


def cosine_of(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@dataclass
class Server:
    """A running ``sie-server`` and a keep-alive client for it."""

    url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=60.0)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def encode_raw(self, items: list[dict[str, Any]], model: str = MODEL, **params: Any) -> httpx.Response:
        body: dict[str, Any] = {"items": items}
        if params:
            body["params"] = params
        return self.client.post(f"/v1/encode/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS)

    def encode(self, texts: list[str], model: str = MODEL, **params: Any) -> list[np.ndarray]:
        """Dense vectors for ``texts`` in one request; fails the test on any non-200."""
        response = self.encode_raw([{"text": t} for t in texts], model, **params)
        assert response.status_code == 200, response.text
        return [item["dense"]["values"] for item in unpack_body(response.content)["items"]]

    def assert_serving(self) -> None:
        """A good request still gets a good answer (the previous bad one did not break the server)."""
        assert self.process.poll() is None, f"server exited with {self.process.returncode}\n{self.log()}"
        (vector,) = self.encode(["the server keeps serving"])
        assert vector.shape == (DIMS,)
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def run_server(log_dir: Path, env: dict[str, str], *extra_args: str) -> Iterator[Server]:
    """Start ``sie-server serve`` on a free port, wait for ``/readyz`` (60 s at most), stop it after."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = log_dir / "server.log"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    child_env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **env})
    command = [
        *_server_command(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--preload",
        MODEL,
        *extra_args,
    ]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=child_env)
    server = Server(url, log_path, process)
    try:
        _wait_ready(server)
        yield server
    finally:
        server.client.close()
        _stop(process)


def _wait_ready(server: Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last_error = "no answer yet"
    with httpx.Client(timeout=2.0) as probe:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                last_error = f"process exited with code {server.process.returncode}"
                break
            try:
                response = probe.get(f"{server.url}/readyz")
                if response.status_code == 200:
                    return
                last_error = f"/readyz answered {response.status_code}"
            except httpx.TransportError as exc:
                last_error = repr(exc)
            time.sleep(0.1)
    _stop(server.process)
    pytest.fail(
        f"sie-server at {server.url} was not ready within {READY_TIMEOUT_S:.0f} s ({last_error}); "
        f"log:\n{server.log()}",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The shared server: default model preloaded, room for 4096 queued items, float32 compute.

    float32 because these tests hold vectors to sentence-transformers' float32 output at 1e-5 and to
    the public server's captured bytes; the bfloat16 CPU default is checked in tests/adapters.
    """
    env = {"SIE_MAX_CONCURRENT_REQUESTS": "4096", "SIE_DEFAULT_COMPUTE_PRECISION": "float32"}
    with run_server(tmp_path_factory.mktemp("sie-server"), env) as running:
        yield running


@pytest.fixture(scope="session")
def server_url(server: Server) -> str:
    return server.url


SMALL_QUEUE = 8
SMALL_BODY_BYTES = 1024 * 1024
SMALL_ITEM_TEXT_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Tight limits: 8 queued items per model, 1 MiB request bodies, 64 KiB of text per item."""
    env = {
        "SIE_MAX_CONCURRENT_REQUESTS": str(SMALL_QUEUE),
        "SIE_MAX_REQUEST_BODY_BYTES": str(SMALL_BODY_BYTES),
        "SIE_MAX_ITEM_TEXT_BYTES": str(SMALL_ITEM_TEXT_BYTES),
    }
    with run_server(tmp_path_factory.mktemp("sie-small-server"), env) as running:
        yield running


@pytest.fixture(scope="module")
def single_model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serves the default model alone (``--models``): a fuzzer that reads ``/v1/models`` finds no other
    id to send work to, so it never makes the process load a second model."""
    with run_server(tmp_path_factory.mktemp("sie-single-model-server"), {}, "--models", MODEL) as running:
        yield running


@pytest.fixture(scope="session")
def unpack() -> Any:
    """``unpack(raw_bytes)``: a msgpack body with its msgpack-numpy arrays rebuilt."""
    return unpack_body


@pytest.fixture(scope="session")
def cosine() -> Any:
    """``cosine(a, b)`` in float64."""
    return cosine_of
