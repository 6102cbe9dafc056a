import logging

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from sie.core.instance import RUNTIME_INSTANCE
from sie.http.errors import Envelope, install
from sie.http.middleware import BodyLimit, IdentityHeaders, SdkVersionSkew


async def echo(request):
    return PlainTextResponse(str(len(await request.body())))


def client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


@pytest.fixture
def app():
    # A body that outgrows the limit mid-stream surfaces inside the route; the app's error table answers it.
    inner = Starlette(routes=[Route("/", echo, methods=["POST"])])
    install(inner, Envelope.NATIVE)
    return IdentityHeaders(BodyLimit(inner, limit=10))


async def test_body_limit_by_length_and_by_stream(app):
    async with client(app) as c:
        ok = await c.post("/", content=b"x" * 10)
        assert ok.status_code == 200 and ok.text == "10"
        assert ok.headers["x-sie-runtime-instance"] == RUNTIME_INSTANCE

        too_big = await c.post("/", content=b"x" * 11)
        assert too_big.status_code == 413  # the public server's code for any input past a bound
        assert too_big.json()["detail"] == {
            "code": "INPUT_TOO_LONG",
            "message": "Request body exceeds the limit of 10 bytes (SIE_MAX_REQUEST_BODY_BYTES)",
        }
        assert too_big.headers["x-sie-error-code"] == "INPUT_TOO_LONG"

        async def chunks():
            for _ in range(5):
                yield b"xxxx"

        streamed = await c.post("/", content=chunks())
        assert streamed.status_code == 413
        assert streamed.json()["detail"]["code"] == "INPUT_TOO_LONG"
        assert streamed.headers["x-sie-runtime-instance"] == RUNTIME_INSTANCE


async def test_body_limit_answers_an_openai_route_in_its_envelope():
    openai_route = Route("/v1/embeddings", echo, methods=["POST"])
    inner = Starlette(routes=[openai_route, Route("/", echo, methods=["POST"])])
    app = BodyLimit(inner, limit=10, openai_routes=[openai_route])
    async with client(app) as c:
        too_big = await c.post("/v1/embeddings", content=b"x" * 11)
        assert too_big.status_code == 413
        error = too_big.json()["error"]
        assert (error["code"], error["type"]) == ("INPUT_TOO_LONG", "invalid_request_error")
        native = await c.post("/", content=b"x" * 11)
        assert (native.status_code, native.json()["detail"]["code"]) == (413, "INPUT_TOO_LONG")


async def test_sdk_skew_warns_once_per_version(caplog):
    inner = Starlette(routes=[Route("/", echo, methods=["POST"])])
    app = SdkVersionSkew(inner, server_version="0.10.0")
    caplog.set_level(logging.WARNING, logger="sie.http.middleware")
    async with client(app) as c:
        for version in ("0.10.1", "0.11.0", "0.12.3", "0.12.0", "1.0.0"):
            assert (await c.post("/", headers={"x-sie-sdk-version": version})).status_code == 200
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        "SDK version 0.12 is not compatible with server 0.10",
        "SDK version 1.0 is not compatible with server 0.10",
    ]


async def _call(app, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> list[dict]:
    """One POST through ``app`` as a server would drive it: ``chunks`` as the body's messages."""
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}
    await app(scope, receive, send)
    return sent


async def test_body_limit_counts_a_chunked_body_whatever_length_it_declares():
    """A declared length within the limit is trusted only without ``Transfer-Encoding``: with both, the
    body is the chunked one, and it is counted."""
    inner = Starlette(routes=[Route("/", echo, methods=["POST"])])
    install(inner, Envelope.NATIVE)
    both = [(b"content-length", b"4"), (b"transfer-encoding", b"chunked")]
    sent = await _call(BodyLimit(inner, limit=10), both, [b"x" * 8, b"x" * 8])
    assert sent[0]["status"] == 413
    alone = await _call(BodyLimit(inner, limit=10), [(b"content-length", b"8")], [b"x" * 8])
    assert (alone[0]["status"], alone[1]["body"]) == (200, b"8")
