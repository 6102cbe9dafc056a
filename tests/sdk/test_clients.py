"""Client-level behaviour: exports, lifecycle, concurrency limit, version-skew warning, light imports."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import sie
import sie.sdk as sdk
from sie.sdk import SIEAsyncClient, SIEClient
from sie.sdk._base import version_skew

from .fakes import BASE_URL, FakeServer, call, encode_body, ok_encode, packed

EXPECTED_EXPORTS = {
    "SIEClient",
    "SIEAsyncClient",
    "Item",
    "EncodeResult",
    "ScoreResult",
    "ExtractResult",
    "ModelInfo",
    "SIEError",
    "SIEConnectionError",
    "RequestError",
    "InputTooLongError",
    "ServerError",
    "ModelLoadFailedError",
    "ResourceExhaustedError",
    "ProvisioningError",
    "PoolError",
    "LoraLoadingError",
    "ModelLoadingError",
    # What the capacity and pool calls return (sie_sdk exports them too).
    "CapacityInfo",
    "WorkerInfo",
    "PoolInfo",
    # What the generation calls return (sie_sdk exports them too).
    "GenerateResult",
    "GenerateChunk",
    "GenerationUsage",
    # sie.sdk.encoding's helpers, re-exported at top level as sie_sdk does (scoring is not).
    "SparseVector",
    "dense_embedding",
    "sparse_embedding",
    "sparse_embedding_dict",
    "normalize_sparse_vector",
    "multivector_embedding",
}


def test_all_is_exactly_the_public_surface():
    assert set(sdk.__all__) == EXPECTED_EXPORTS
    assert all(hasattr(sdk, name) for name in sdk.__all__)


def test_importing_the_sdk_pulls_in_no_server_stack():
    src = Path(sie.__file__).resolve().parents[1]
    probe = (
        "import sys, sie.sdk; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('msgspec', 'torch', 'fastapi', 'pydantic') "
        "or m.startswith(('sie.server', 'sie.engine'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(src)},
    )
    assert out.stdout.strip() == "[]"


def test_sync_client_is_a_context_manager_that_closes_its_http_client():
    http = httpx.Client(transport=httpx.MockTransport(FakeServer(ok_encode())))
    with SIEClient(BASE_URL, http_client=http) as client:
        assert client.encode("m", {"text": "x"})["dense"].shape == (3,)
    assert http.is_closed


async def test_async_client_is_an_async_context_manager_that_closes_its_http_client():
    http = httpx.AsyncClient(transport=httpx.MockTransport(FakeServer(ok_encode())))
    async with SIEAsyncClient(BASE_URL, http_client=http) as client:
        assert (await client.encode("m", {"text": "x"}))["dense"].shape == (3,)
    assert http.is_closed


def test_the_two_clients_offer_the_same_methods_with_the_same_arguments():
    import inspect

    for name in ("encode", "score", "extract", "list_models", "get_model"):
        sync_params = inspect.signature(getattr(SIEClient, name)).parameters
        async_params = inspect.signature(getattr(SIEAsyncClient, name)).parameters
        assert list(sync_params) == list(async_params), name
        assert inspect.iscoroutinefunction(getattr(SIEAsyncClient, name))
    assert list(inspect.signature(SIEClient.encode).parameters) == [
        "self",
        "model",
        "items",
        "output_types",
        "instruction",
        "output_dtype",
        "is_query",
        "options",
        "gpu",
        "wait_for_capacity",
        "provision_timeout_s",
        "max_oom_retries",
    ]


async def _peak_concurrency(max_concurrency: int | None, calls: int) -> int:
    in_flight = peak = 0
    body = packed(encode_body(1))

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return body()

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with SIEAsyncClient(BASE_URL, http_client=http, max_concurrency=max_concurrency) as client:
        results = await asyncio.gather(*(client.encode("m", {"text": str(i)}) for i in range(calls)))
    assert len(results) == calls
    return peak


async def test_max_concurrency_bounds_requests_in_flight():
    assert await _peak_concurrency(2, 6) == 2
    assert await _peak_concurrency(None, 6) == 6


@pytest.mark.parametrize(
    ("sdk_version", "server_version", "warns"),
    [
        ("0.10.0", "0.10.5", False),
        ("0.10.0", "0.11.0", False),
        ("0.10.0", "0.9.2", False),
        ("0.10.0", "0.12.0", True),
        ("0.10.0", "1.10.0", True),
        ("0.10.0", "unknown", False),
        ("dev", "0.10.0", False),
    ],
)
def test_version_skew_rule(sdk_version, server_version, warns):
    assert (version_skew(sdk_version, server_version) is not None) is warns


async def test_skew_is_checked_once_per_process(make_client, caplog, monkeypatch):
    monkeypatch.setattr("sie.sdk._base.__version__", "0.10.0")
    server = FakeServer(packed(encode_body(1), headers={"X-SIE-Server-Version": "2.0.0"}))
    client = make_client(server)
    with caplog.at_level(logging.WARNING, logger="sie.sdk"):
        await call(client, "encode", "m", {"text": "x"})
        await call(client, "encode", "m", {"text": "x"})
    warnings = [r for r in caplog.records if "different major version" in r.getMessage()]
    assert len(warnings) == 1
    assert "2.0.0" in warnings[0].getMessage()
