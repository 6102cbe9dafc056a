"""A Hugging Face Hub stand-in on loopback, for the tests that must see whether the Hub was asked.

``huggingface_hub`` talks to it for real (``constants.ENDPOINT`` pointed here, offline mode off): each
request's path is recorded; a repository in ``repos`` answers its file listing (``model_info`` with
sizes), anything else 404 as the Hub answers a repository that does not exist. A file is served only
when ``files`` holds its bytes (``serve``), with the headers ``huggingface_hub`` downloads by (the
commit, an ETag, the length); the other tests using it show that nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Hub:
    url: str
    repos: dict[str, dict[str, int]] = field(default_factory=dict)  # repo id -> file -> bytes
    asked: list[str] = field(default_factory=list)  # request paths, in order
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo id -> file -> content

    def serve(self, repo: str, files: dict[str, bytes]) -> None:
        """``repo`` listed with ``files`` and each of them downloadable."""
        self.repos[repo] = {name: len(data) for name, data in files.items()}
        self.files[repo] = dict(files)


COMMIT = "0" * 40


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hub.asked.append(self.path)
            path = self.path.split("?")[0]
            if self._file(path) or self._tree(path):
                return
            repo = next(
                (r for r in hub.repos if path in (f"/api/models/{r}", f"/api/models/{r}/revision/main")),
                None,
            )
            if repo is None:
                self._answer(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return
            siblings = [{"rfilename": name, "size": size} for name, size in hub.repos[repo].items()]
            self._answer(200, {"id": repo, "sha": COMMIT, "siblings": siblings}, {})

        do_HEAD = do_GET

        def _tree(self, path: str) -> bool:
            """``/api/models/<repo>/tree/<revision>`` of a served repository: its files, one page."""
            repo, sep, _ = path.removeprefix("/api/models/").partition("/tree/")
            if not sep or repo not in hub.files:
                return False
            files = hub.files[repo]
            entries = [
                {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                for name, data in files.items()
            ]
            self._answer(200, entries, {})
            return True

        def _file(self, path: str) -> bool:
            """``/<repo>/resolve/<revision>/<file>`` of a served file: its bytes (a HEAD: the headers)."""
            repo, sep, rest = path.lstrip("/").partition("/resolve/")
            name = rest.partition("/")[2]
            data = hub.files.get(repo, {}).get(name) if sep else None
            if data is None:
                return False
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(data)
            return True

        def _answer(self, status: int, body: Any, headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def running_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    """A Hub on a free loopback port that this process's ``huggingface_hub`` uses, online."""
    constants = pytest.importorskip("huggingface_hub.constants")
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    hub = Hub(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    # Made from ENDPOINT at import: file downloads would still go to the real Hub.
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
