"""Drive both SDK clients through ``httpx.MockTransport``: no network, no real sleeping.

Most tests are written once and run against ``SIEClient`` and ``SIEAsyncClient`` (the ``kind``
parameter); ``fakes.call`` awaits the result only when the client is the async one.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sie.sdk import SIEAsyncClient, SIEClient
from sie.sdk._base import BaseClient

from .fakes import BASE_URL, FakeServer, FakeTime


@pytest.fixture(autouse=True)
def _clean_process_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SIE_BASE_URL", raising=False)
    monkeypatch.delenv("SIE_API_KEY", raising=False)
    monkeypatch.setattr(BaseClient, "_version_checked", False)


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def make_client(kind: str, fake_time: FakeTime):
    """``make_client(server, **kwargs)``: a client of this test's kind, on fake time, with no jitter."""
    clients: list[SIEClient | SIEAsyncClient] = []

    def make(server: FakeServer, **kwargs: Any) -> SIEClient | SIEAsyncClient:
        transport = httpx.MockTransport(server)
        client: SIEClient | SIEAsyncClient
        if kind == "sync":
            client = SIEClient(BASE_URL, http_client=httpx.Client(transport=transport), **kwargs)
            client._sleep = fake_time.sleep
        else:
            client = SIEAsyncClient(BASE_URL, http_client=httpx.AsyncClient(transport=transport), **kwargs)
            client._sleep = fake_time.async_sleep
        client._clock = fake_time.clock
        client._jitter = lambda delay: delay
        clients.append(client)
        return client

    yield make
    for client in clients:
        if isinstance(client, SIEAsyncClient):
            await client.close()
        else:
            client.close()
