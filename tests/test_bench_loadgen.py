"""The multi-process load generator against a real HTTP/1.1 server on loopback (http.server in a
thread): every request is sent once, counted once, and its status reported."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgpack
import pytest

from bench.gpu_cells import Pool, http_cell
from bench.http1 import Connection
from bench.loadgen import TextBodies, Wire, run_load, split
from bench.stats import CellSpec


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    seen: list[str]
    lock: threading.Lock

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"world"):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.headers["Content-Type"] == "application/msgpack":
            texts = [item["text"] for item in msgpack.unpackb(body)["items"]]
        else:
            texts = json.loads(body)["input"]
        with self.lock:
            self.seen.extend(texts)
        busy = any(text.startswith("busy") for text in texts)
        payload = json.dumps({"items": len(texts)}).encode()
        self.send_response(503 if busy else 200)
        if busy:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Handler,), {"seen": seen, "lock": threading.Lock()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


TEXTS = tuple(f"busy-{i}" if i % 5 == 0 else f"text-{i}" for i in range(40))


def test_every_request_sent_once_and_counted_once_with_its_status(server):
    base_url, seen = server
    bodies = TextBodies(TEXTS, per_request=1, wire=Wire.JSON, model="m")
    report = run_load(
        base_url, "/v1/embeddings", bodies, concurrency=6, processes=3, requests=40, warm_up=False
    )
    assert report.processes == 3
    assert report.requests == 40
    assert Counter(seen) == Counter(TEXTS)  # the server saw each request exactly once
    assert sorted(report.answered) == [i for i in range(40) if i % 5]
    assert report.statuses == {200: 32, 503: 8}
    assert report.failed == 8
    assert len(report.latencies_s) == 32
    assert report.elapsed_s > 0
    assert "HTTP 503" in report.error_sample


def test_warm_up_sends_one_untimed_request_per_connection(server):
    base_url, seen = server
    bodies = TextBodies(TEXTS, per_request=5, wire=Wire.JSON, model="m")
    at_release: list[int] = []
    report = run_load(
        base_url,
        "/v1/embeddings",
        bodies,
        concurrency=4,
        processes=2,
        requests=10,
        on_release=lambda: at_release.append(len(seen)),
    )
    assert at_release == [4 * 5]  # the hook ran once, after every warm-up was answered
    assert report.requests == 10
    assert report.statuses == {503: 10}  # five consecutive texts always hold one "busy" text ...
    assert len(seen) == (10 + 4) * 5  # ... and each of the 4 connections sent one warm-up first


def test_text_bodies_walk_the_pool_round_robin():
    bodies = TextBodies(("a", "b", "c"), per_request=2, wire=Wire.MSGPACK)
    assert [bodies.text_indices(i) for i in range(3)] == [[0, 1], [2, 0], [1, 2]]
    assert bodies.content_type == "application/msgpack"


def test_split_is_proportional_and_exact():
    assert split(64, [1, 1, 1]) == [21, 22, 21]
    assert split(10, [3, 1]) == [8, 2]
    assert sum(split(4097, [7, 5, 3])) == 4097


def test_chunked_answers_are_read_whole_on_a_kept_connection(server):
    base_url, _ = server

    async def two_posts() -> list[bytes]:
        conn = Connection("127.0.0.1", int(base_url.rsplit(":", 1)[1]))
        try:
            first = await conn.post("/chunked", b"{}", "application/json", "application/json")
            second = await conn.post("/v1/embeddings", b'{"input": ["x"]}', "application/json", "*/*")
        finally:
            await conn.close()
        return [first.body, second.body]

    assert asyncio.run(two_posts()) == [b"hello world", b'{"items": 1}']


@dataclass
class _Running:
    """What ``http_cell`` reads of a started server (this process stands in for its CPU time)."""

    base_url: str
    model: str = "bench/tiny"
    pid: int = field(default_factory=os.getpid)


def test_a_generator_cell_counts_items_and_tokens_of_answered_requests(server):
    base_url, _ = server
    pool = Pool(list(TEXTS), tokens=list(range(40)))
    cell = http_cell(
        _Running(base_url), CellSpec("http", 4, 5), pool, requests=6, processes=2, max_seconds=30
    )
    assert (cell.requests, cell.items, cell.errors) == (0, 0, 6)  # every 5-text window holds a busy one
    assert cell.statuses == {503: 6}
    single = http_cell(
        _Running(base_url), CellSpec("http", 3, 1), pool, requests=10, processes=1, max_seconds=30
    )
    answered = [i for i in range(10) if i % 5]
    assert (single.requests, single.items, single.errors) == (8, 8, 2)
    assert single.tokens == sum(answered)  # text i has i tokens here
    assert single.items_per_s > 0 and single.p50_ms > 0
