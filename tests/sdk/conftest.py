"""Drive both SDK clients through ``httpx.MockTransport``: no network, no real sleeping.

Most tests are written once and run against ``SIEClient`` and ``SIEAsyncClient`` (the ``kind``
parameter); ``fakes.call`` awaits the result only when the client is the async one. The client-side
helpers are compared with the public SDK's through ``helper_cases`` (the ``*_helper_results`` fixtures).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from sie.sdk import SIEAsyncClient, SIEClient
from sie.sdk._base import BaseClient

from . import helper_cases
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


@pytest.fixture(scope="session")
def public_helper_results(run_public_sdk) -> dict[str, Any]:
    """``helper_cases.run`` as the public ``sie_sdk.scoring``/``sie_sdk.encoding`` answer it."""
    return run_public_sdk(Path(helper_cases.__file__).read_text())


@pytest.fixture(scope="session")
def our_helper_results() -> dict[str, Any]:
    """The same cases through ours, in the same JSON form (tuples become lists, as on the other side)."""
    import sie.sdk
    from sie.sdk import encoding, scoring

    return json.loads(json.dumps(helper_cases.run(scoring, encoding, sie.sdk)))
