"""A real headless Chromium (Debian's ``chromium``), driven over the DevTools protocol: open a page,
read what it shows, take a screenshot. The test starts it with ``--headless --no-sandbox
--disable-gpu --disable-background-networking`` on a free port and a throwaway profile."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from tests.e2e.conftest import _free_port


class Page:
    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=30))
            if message.get("id") == ident:
                assert "error" not in message, message
                result: dict[str, Any] = message["result"]
                return result

    def evaluate(self, expression: str) -> Any:
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return answer["result"].get("value")

    def text(self) -> str:
        return str(self.evaluate("document.body.innerText"))

    def wait_for_text(self, *wanted: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            shown = self.text()
            if all(w in shown for w in wanted):
                return shown
            assert time.monotonic() < deadline, f"the page never showed {wanted}; it shows:\n{shown}"
            time.sleep(0.2)

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


class Browser:
    def __init__(self, port: int) -> None:
        self.port = port

    @contextlib.contextmanager
    def open(self, url: str) -> Iterator[Page]:
        target = httpx.put(f"http://127.0.0.1:{self.port}/json/new?{url}", timeout=10).json()
        with connect(target["webSocketDebuggerUrl"], max_size=None) as socket:
            page = Page(socket)
            page.call(
                "Emulation.setDeviceMetricsOverride",
                width=1280,
                height=860,
                deviceScaleFactor=1,
                mobile=False,
            )
            yield page


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[Browser]:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("chromium not found (Debian package chromium; scripts/test installs it where apt allows)")
    port = _free_port()
    argv = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        f"--remote-debugging-port={port}",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/json/version", timeout=2).status_code == 200:
                    break
            assert process.poll() is None and time.monotonic() < deadline, "chromium did not start"
            time.sleep(0.1)
        yield Browser(port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
