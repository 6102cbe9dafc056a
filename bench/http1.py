"""A minimal HTTP/1.1 client over asyncio streams: POST a body on a keep-alive connection, read the
answer (``Content-Length`` or chunked). Bench-only: no TLS, no redirects, no proxies.

Why not httpx: the load generator has to stay far below the server's cost per request. httpx builds
a request object, runs hooks and a connection pool per call; in one process it tops out near 110
requests/s at 64 connections, less than a GPU server answers. This path is one ``write`` and two
or three ``read`` calls per request.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

MAX_HEAD_BYTES: Final = 64 * 1024


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 this client can read; the message quotes what was read."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes


def host_port(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"expected an http://host:port URL, got {base_url!r}")
    return parts.hostname, parts.port or 80


def request_head(host: str, port: int, path: str, content_type: str, accept: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
        f"Accept: {accept}\r\nContent-Length: {length}\r\n\r\n"
    ).encode("latin-1")


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not status_line[1].isdigit():
        raise ProtocolError(f"bad status line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return int(status_line[1]), headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


class Connection:
    """One keep-alive connection; reopened on the next ``post`` after the server closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=MAX_HEAD_BYTES
            )
        return self._reader, self._writer

    async def post(self, path: str, body: bytes, content_type: str, accept: str) -> Answer:
        """Sends one request and reads the whole answer. Any failure closes the connection (its
        state is unknown) and propagates; the next call opens a new one."""
        try:
            reader, writer = await self._open()
            writer.write(request_head(self.host, self.port, path, content_type, accept, len(body)) + body)
            head = await reader.readuntil(b"\r\n\r\n")
            status, headers = parse_head(head[:-4])
            if "content-length" in headers:
                payload = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                payload = await _read_chunked(reader)
            else:
                raise ProtocolError(f"answer {status} has neither Content-Length nor chunked encoding")
        except BaseException:
            self._drop()
            raise
        if headers.get("connection", "").lower() == "close":
            self._drop()
        return Answer(status, headers, payload)

    def _drop(self) -> asyncio.StreamWriter | None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
        return writer

    async def close(self) -> None:
        writer = self._drop()
        if writer is not None:
            with contextlib.suppress(OSError):
                await writer.wait_closed()
