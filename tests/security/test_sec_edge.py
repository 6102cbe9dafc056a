"""The HTTP edge of the gateway and the server under hostile requests (audit H1, H2, M1, M2, M3, M4,
L7): metric labels a caller cannot multiply, the item cap before any decoding, auth that fails
closed, and pools owned by the token that leased them.

The gateway runs in process on a real ``nats-server`` (its pools bucket and work streams are real);
the server in process on the packaged MiniLM. Requests go through ``httpx.ASGITransport``."""

from __future__ import annotations

import asyncio
import logging
import random
import string
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import nats
import pytest
import pytest_asyncio
from pydantic import ValidationError

from sie.gateway.app import create_app as create_gateway
from sie.gateway.shares import ShareExhausted, StreamShares
from sie.queue.contract import Heartbeat, encode_heartbeat, health_subject
from sie.server.app import create_app as create_server
from sie.settings.gateway import GatewaySettings
from sie.settings.server import Settings
from tests.conftest import NatsServer
from tests.inprocess import rss_mib, served

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE = f"/v1/encode/{MINILM}"
BODY = {"items": [{"text": "one"}]}
CAP = 512
MILLION = msgspec.json.encode({"items": [{"text": "a"}] * 1_000_000})
MILLION_MSGPACK = msgspec.msgpack.encode({"items": [{"text": "a"}] * 1_000_000})

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _noise(n: int = 24) -> str:
    return "".join(random.choices(string.ascii_letters + string.digits, k=n))


def _lines(text: str) -> int:
    return len(text.splitlines())


def _gateway_settings(nats_server: NatsServer, **fields: Any) -> GatewaySettings:
    defaults: dict[str, Any] = {
        "nats_url": nats_server.url,
        "auth_mode": "token",
        "auth_tokens": "alpha,beta",
        "auth_pool_tokens": "tenant-a,tenant-b",
        "admin_token": "root",
        "gateway_request_timeout": 1.0,
    }
    return GatewaySettings(**{**defaults, **fields})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway(nats_server: NatsServer) -> AsyncIterator[httpx.AsyncClient]:
    app = create_gateway(_gateway_settings(nats_server))
    async with served(app, "http://gateway", timeout=30) as client:
        deadline = time.monotonic() + 30
        while app.state.gateway.pools is None:  # joined NATS: pools and the dispatcher exist
            assert time.monotonic() < deadline, "the gateway never joined NATS"
            await asyncio.sleep(0.05)
        yield client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server() -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(preload_models=MINILM, hot_reload=False, default_compute_precision="float32")
    async with served(create_server(settings), "http://server") as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _gateway_noise(gateway: httpx.AsyncClient, fixed: bool) -> None:
    """One of each kind of request a caller controls the values of: unauthenticated and authenticated,
    any machine profile and pool header, any model path, any pool name; random values unless ``fixed``."""

    def value() -> str:
        return "fixed" if fixed else _noise()

    token = random.choice(["alpha", "tenant-a"])
    for headers in ({}, bearer("wrong"), bearer(token)):
        profile = {"X-SIE-Machine-Profile": value(), **headers}
        await gateway.post(ENCODE, json=BODY, headers=profile)
        await gateway.post(
            ENCODE, json=BODY, headers={"X-SIE-Machine-Profile": f"{value()}/{value()}", **headers}
        )
        await gateway.post(ENCODE, json=BODY, headers={"X-SIE-Pool": value(), **headers})
        await gateway.post(f"/v1/encode/{value()}", json=BODY, headers=profile)
        await gateway.get(f"/v1/score/{value()}", headers=profile)
        await gateway.post(f"/v1/{value()}", json=BODY, headers=headers)


async def test_gateway_metrics_do_not_grow_with_what_callers_send(gateway: httpx.AsyncClient) -> None:
    """H1: 1,000 requests with random profile, pool and path values, with and without a valid token,
    add no line to ``/metrics`` (the same /metrics feeds Prometheus and KEDA)."""
    await _gateway_noise(gateway, fixed=True)  # every series these outcomes make, once
    before = (await gateway.get("/metrics", headers=bearer("alpha"))).text
    for _ in range(1000 // 18 + 1):
        await _gateway_noise(gateway, fixed=False)
    after = (await gateway.get("/metrics", headers=bearer("alpha"))).text
    assert _lines(after) == _lines(before), set(after.splitlines()) - set(before.splitlines())
    assert 'machine_profile="other"' in after  # counted, under the one label callers share


async def test_server_metrics_do_not_grow_with_what_callers_send(server: httpx.AsyncClient) -> None:
    """M4: a 405, a 404 and a 413 on any path the caller makes up all count under ``unknown``."""

    async def noise(fixed: bool) -> None:
        name = "fixed/model" if fixed else f"{_noise()}/{_noise()}"
        await server.get(f"/v1/encode/{name}")  # 405
        await server.post(f"/v1/encode/{name}", json=BODY)  # 404
        await server.post(f"/v1/extract/{name}", content=b"not json")
        await server.post(f"/v1/score/{name}", json={"query": {"text": "q"}, "items": [{"text": "a"}]})

    await noise(fixed=True)
    before = (await server.get("/metrics")).text
    for _ in range(250):
        await noise(fixed=False)
    after = (await server.get("/metrics")).text
    assert _lines(after) == _lines(before), set(after.splitlines()) - set(before.splitlines())
    assert 'model="unknown"' in after


async def _work_stream_messages(nats_url: str) -> int:
    client = await nats.connect(nats_url)
    try:
        total = 0
        async for stream in _streams(client):
            if stream.config.name.startswith("WORK_"):
                total += stream.state.messages
        return total
    finally:
        await client.close()


async def _streams(client: Any) -> AsyncIterator[Any]:
    for stream in await client.jetstream().streams_info():
        yield stream


@pytest.mark.parametrize(
    "body,content_type", [(MILLION, "application/json"), (MILLION_MSGPACK, "application/msgpack")]
)
async def test_gateway_refuses_a_million_items_before_decoding_or_publishing(
    gateway: httpx.AsyncClient, nats_server: NatsServer, body: bytes, content_type: str
) -> None:
    """H2: a worker serves the lane, so an admitted request would be published; a million items are
    refused 400 with the limit named, nothing reaches the work stream, and the gateway's memory stays
    where it was (decoded, they would be some 300 MB of structs)."""
    client = await nats.connect(nats_server.url)
    beat = Heartbeat("w-edge", True, "default", "default", "default", time.time())
    await client.publish(health_subject("w-edge"), encode_heartbeat(beat))
    await client.flush()
    await client.close()
    await asyncio.sleep(0.2)
    before_messages = await _work_stream_messages(nats_server.url)
    rss = rss_mib()
    started = time.perf_counter()
    response = await gateway.post(
        ENCODE, content=body, headers={"content-type": content_type, **bearer("alpha")}
    )
    elapsed = time.perf_counter() - started
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == "INVALID_INPUT"
    assert f"at most {CAP} per request" in response.json()["detail"]["message"]
    assert elapsed < 1.0  # a scan, not a decode, a tokenization or a million publishes (bench: ms)
    assert rss_mib() - rss < 100
    assert await _work_stream_messages(nats_server.url) == before_messages
    # The same lane takes an admitted request: it is published (and, with no real worker, times out).
    answered = await gateway.post(ENCODE, json=BODY, headers=bearer("alpha"))
    assert answered.status_code == 503 and answered.json()["detail"]["code"] == "MODEL_LOADING"
    assert await _work_stream_messages(nats_server.url) == before_messages + 1


@pytest.mark.parametrize(
    "path,body",
    [
        (ENCODE, MILLION),
        (
            f"/v1/score/{MINILM}",
            msgspec.json.encode({"query": {"text": "q"}, "items": [{"text": "a"}] * 1_000_000}),
        ),
        ("/v1/embeddings", msgspec.json.encode({"model": MINILM, "input": ["a"] * 1_000_000})),
        ("/v1/rerank", msgspec.json.encode({"model": MINILM, "query": "q", "documents": ["a"] * 1_000_000})),
    ],
)
async def test_server_refuses_a_million_items_before_tokenizing(
    server: httpx.AsyncClient, path: str, body: bytes
) -> None:
    rss = rss_mib()
    started = time.perf_counter()
    response = await server.post(path, content=body, headers={"content-type": "application/json"})
    elapsed = time.perf_counter() - started
    assert response.status_code == 400, response.text
    payload = response.json()
    message = payload["detail"]["message"] if "detail" in payload else payload["error"]["message"]
    assert f"at most {CAP} per request (SIE_MAX_ITEMS_PER_REQUEST)" in message
    assert elapsed < 1.0  # tokenizing a million items takes minutes on these cores
    assert rss_mib() - rss < 100
    assert (await server.post(ENCODE, json={"items": [{"text": "a"}] * CAP})).status_code == 200


@pytest.mark.parametrize("mode", ["tokens", "bearer", "yes", "static-ish"])
async def test_an_unknown_auth_mode_refuses_to_start(mode: str) -> None:
    """M1: a typo used to turn auth off while tokens were set; now the settings refuse it."""
    with pytest.raises(ValidationError, match="auth_mode"):
        GatewaySettings(nats_url="nats://127.0.0.1:1", auth_mode=mode, auth_tokens="alpha")
    with pytest.raises(ValidationError, match="auth_mode"):
        Settings(auth_mode=mode)


@pytest.mark.parametrize("mode", ["static ", " Token", "TOKEN"])
async def test_spacing_and_case_of_a_known_mode_still_enable_auth(mode: str) -> None:
    assert GatewaySettings(nats_url="nats://x", auth_mode=mode, auth_tokens="a").auth_config().enabled


async def test_tokens_with_auth_off_are_said_out_loud(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = GatewaySettings(nats_url="nats://x", auth_tokens="alpha").auth_config()
    assert not config.enabled
    assert "SIE_AUTH_MODE is none" in caplog.text


async def test_the_servers_own_api_checks_tokens_when_asked(nats_server: NatsServer) -> None:
    """M3: a worker's HTTP API (a Service in the chart) takes the gateway's tokens when auth is on;
    its probes stay open."""
    settings = Settings(
        hot_reload=False, auth_mode="token", auth_tokens="alpha", model_filter=MINILM, preload_models=""
    )
    async with served(create_server(settings), "http://server", timeout=5) as client:
        refused = await client.post(ENCODE, json=BODY)
        assert refused.status_code == 401 and refused.json()["detail"]["code"] == "UNAUTHORIZED"
        assert (await client.get("/v1/models", headers=bearer("nope"))).status_code == 401
        assert (await client.get("/v1/models", headers=bearer("alpha"))).status_code == 200
        assert (await client.get("/healthz")).status_code == 200


async def test_pools_belong_to_the_token_that_leased_them(gateway: httpx.AsyncClient) -> None:
    """M2, L7: a pool token leases a pool it owns; another tenant can neither renew, delete, update
    nor route into it; the admin can; a client token cannot lease; resolve is a read."""
    spec = {"name": "tenant-a-eval", "gpus": {"default": 1}}
    assert (await gateway.post("/v1/pools", json=spec, headers=bearer("alpha"))).status_code == 403
    created = await gateway.post("/v1/pools", json=spec, headers=bearer("tenant-a"))
    assert created.status_code == 201, created.text
    for method, path in (
        ("POST", "/v1/pools/tenant-a-eval/renew"),
        ("DELETE", "/v1/pools/tenant-a-eval"),
        ("POST", "/v1/pools"),
    ):
        other = await gateway.request(method, path, json=spec, headers=bearer("tenant-b"))
        assert other.status_code == 403, (method, path, other.text)
        assert "belongs to another token" in other.json()["detail"]["message"]
    routed = await gateway.post(
        ENCODE, json=BODY, headers={"X-SIE-Pool": "tenant-a-eval", **bearer("tenant-b")}
    )
    assert routed.status_code == 403
    own = await gateway.post(ENCODE, json=BODY, headers={"X-SIE-Pool": "tenant-a-eval", **bearer("tenant-a")})
    assert own.status_code in (202, 503) and own.json().get("detail", {}).get("code") != "FORBIDDEN"
    assert (
        await gateway.post("/v1/pools/tenant-a-eval/renew", headers=bearer("tenant-a"))
    ).status_code == 200
    assert (await gateway.delete("/v1/pools/tenant-a-eval", headers=bearer("root"))).status_code == 200
    resolve = await gateway.post("/v1/configs/resolve", json={"model": MINILM}, headers=bearer("alpha"))
    assert resolve.status_code != 403, resolve.text
    assert (await gateway.post("/v1/configs/models", json={}, headers=bearer("alpha"))).status_code == 403


async def test_operational_paths_are_exempt_exactly(nats_server: NatsServer) -> None:
    """L8: with SIE_AUTH_EXEMPT_OPERATIONAL the listed paths open, and no path under them by prefix."""
    app = create_gateway(_gateway_settings(nats_server, auth_exempt_operational=True))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/ws/anything-else")).status_code == 401
        assert (await client.get("/metrics/more")).status_code == 401
        assert (await client.get("/healthz/more")).status_code == 401


async def test_a_token_holds_at_most_its_share_of_a_pools_stream() -> None:
    """H2: one token's items in flight per pool stop at its share (the stream holds 100,000 and
    discards new ones past that, for every tenant alike); others and other pools are unaffected."""
    shares = StreamShares(0.25)
    assert shares.limit == 25_000
    with shares.hold("tenant-a", "default", 20_000):
        with pytest.raises(ShareExhausted) as refused, shares.hold("tenant-a", "default", 5_001):
            pass
        assert refused.value.code.value == "QUEUE_FULL" and refused.value.retry_after_s == 1
        with shares.hold("tenant-b", "default", 25_000), shares.hold("tenant-a", "eval", 25_000):
            pass
        with shares.hold(None, "default", 1_000_000):  # auth off: no tenants to tell apart
            pass
    with shares.hold("tenant-a", "default", 25_000):  # released: the whole share again
        pass
