"""The gateway's inference routes in process, through ``httpx.ASGITransport`` with a dispatcher that
records what would be published and answers from a table: the work items a request becomes, the
reply, and every refusal with the status, code and ``Retry-After`` of the one error table. No NATS,
no worker: the real cluster runs the same routes in tests/e2e/test_cluster.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import pytest

from sie.gateway.app import create_app
from sie.gateway.errors import PublishFailed
from sie.gateway.state import GatewayState
from sie.queue.codec import request_of
from sie.queue.contract import Heartbeat, WorkItem, WorkResult
from sie.settings.gateway import GatewaySettings
from sie.wire import codec
from sie.wire.requests import EncodeRequest
from sie.wire.responses import DenseVector, EncodeResult

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE = f"/v1/encode/{MINILM}"
BODY = {"items": [{"id": "a", "text": "one"}, {"text": "two"}], "params": {"output_dtype": "float16"}}


def encoded(work: WorkItem) -> WorkResult:
    """What a worker would answer an encode item with: a 2-wide vector naming the item's index."""
    result = EncodeResult(id=work.item.id if work.item else None)
    result.dense = DenseVector(2, "float32", [float(work.item_index), 1.0])
    return WorkResult(
        work.work_item_id,
        work.request_id,
        work.item_index,
        True,
        result_msgpack=codec.encode(result, as_json=False),
        worker_id="w1",
        units={"input_tokens": 3},
    )


@dataclass
class Dispatcher:
    """``gateway.dispatch.Dispatcher`` without NATS: records the items, answers with ``answer``."""

    answer: Callable[[WorkItem], WorkResult | None] = encoded
    fail: Exception | None = None
    published: list[tuple[str, list[WorkItem]]] = field(default_factory=list)
    router_id: str = "router"

    def new_request_id(self) -> str:
        return f"r{len(self.published)}"

    def reply_subject(self, request_id: str) -> str:
        return f"_INBOX.{self.router_id}.{request_id}"

    async def ensure_stream(self, pool: str) -> None:
        return None

    async def check_backlog(self, pool: str) -> None:
        pass  # the stream depth is the real dispatcher's (tests/e2e/test_cluster_variables.py)

    async def run(
        self, request_id: str, subject: str, items: list[WorkItem], timeout_s: float
    ) -> list[WorkResult | None]:
        self.published.append((subject, items))
        if self.fail is not None:
            raise self.fail
        return [self.answer(item) for item in items]


def worker(ready: bool = True) -> Heartbeat:
    return Heartbeat(
        name="w1",
        ready=ready,
        machine_profile="cpu",
        pool_name="default",
        bundle="default",
        timestamp=time.time(),
    )


@pytest.fixture(scope="module")
def app() -> Any:
    settings = GatewaySettings(
        nats_url="nats://127.0.0.1:1", gateway_provisioning_retry_after_s=30, gateway_configured_gpus="cpu"
    )
    return create_app(settings)


@pytest.fixture
async def gateway(app: Any) -> AsyncIterator[tuple[httpx.AsyncClient, GatewayState, Dispatcher]]:
    state: GatewayState = app.state.gateway
    dispatcher = Dispatcher()
    state.dispatcher = dispatcher  # type: ignore[assignment]
    state.workers.update(worker())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        yield client, state, dispatcher
    state.workers.update(msgspec.structs.replace(worker(), terminated=True))


async def test_a_request_becomes_its_work_items_and_the_results_its_reply(gateway) -> None:
    client, _, dispatcher = gateway
    response = await client.post(ENCODE, json=BODY, headers={"accept": "application/json"})
    assert response.status_code == 200, response.text
    ((subject, items),) = dispatcher.published
    assert subject == "sie.work.default.cpu.default.sentence-transformers__all-MiniLM-L6-v2"
    assert [request_of(item) for item in items] == [
        msgspec.convert({**BODY, "items": [item]}, EncodeRequest) for item in BODY["items"]
    ]
    body = response.json()
    assert [(i.get("id"), i["dense"]["values"]) for i in body["items"]] == [
        ("a", [0.0, 1.0]),
        (None, [1.0, 1.0]),
    ]
    assert response.headers["x-sie-worker"] == "w1" and response.headers["x-sie-served-by"] == "queue"


async def test_bad_input_is_refused_before_anything_is_published(gateway) -> None:
    client, _, dispatcher = gateway
    response = await client.post(ENCODE, json={"items": []})
    assert (response.status_code, response.json()["detail"]["code"]) == (400, "INVALID_INPUT")
    assert response.headers["x-sie-error-code"] == "INVALID_INPUT" and "message" not in response.json()
    missing = await client.post("/v1/encode/nobody/here", json=BODY)
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "MODEL_NOT_FOUND"
    assert dispatcher.published == []


async def test_a_body_past_the_limit_is_413_before_anything_is_published() -> None:
    """``SIE_MAX_REQUEST_BODY_BYTES`` on the gateway: the 413 ``INPUT_TOO_LONG`` of the middleware the
    server mounts too (a real server's is tests/e2e/test_bad_input.py), read no further."""
    limit = 64 * 1024
    app = create_app(GatewaySettings(nats_url="nats://127.0.0.1:1", max_request_body_bytes=limit))
    state: GatewayState = app.state.gateway
    dispatcher = Dispatcher()
    state.dispatcher = dispatcher  # type: ignore[assignment]
    state.workers.update(worker())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        fits = await client.post(ENCODE, json={"items": [{"text": "x" * (limit - 64)}]})
        assert fits.status_code == 200, fits.text
        response = await client.post(ENCODE, json={"items": [{"text": "x" * (limit + 1)}]})
    assert response.status_code == 413, response.text
    assert response.json()["detail"] == {
        "code": "INPUT_TOO_LONG",
        "message": f"Request body exceeds the limit of {limit} bytes (SIE_MAX_REQUEST_BODY_BYTES)",
    }
    assert response.headers["x-sie-error-code"] == "INPUT_TOO_LONG"
    assert len(dispatcher.published) == 1  # the body that fit


@pytest.mark.parametrize(
    ("fail", "answer", "status", "code", "wait"),
    [
        (PublishFailed("stream full"), encoded, 503, "QUEUE_FULL", "1"),
        (None, lambda work: None, 503, "MODEL_LOADING", "5"),
        (
            None,
            lambda work: WorkResult(
                work.work_item_id,
                work.request_id,
                work.item_index,
                False,
                error="x",
                error_code="LORA_LOADING",
            ),
            503,
            "LORA_LOADING",
            "1",
        ),
    ],
    ids=["publish refused", "no answer in time", "every item failed alike"],
)
async def test_refusals_wait_as_the_table_says(gateway, fail, answer, status, code, wait) -> None:
    client, _, dispatcher = gateway
    dispatcher.fail, dispatcher.answer = fail, answer
    response = await client.post(ENCODE, json=BODY)
    assert (response.status_code, response.json()["detail"]["code"]) == (status, code)
    assert response.headers["retry-after"] == wait and response.headers["x-sie-error-code"] == code


async def test_items_failing_with_different_codes_are_listed(gateway) -> None:
    client, _, dispatcher = gateway
    codes = ["INVALID_INPUT", "INFERENCE_ERROR"]
    dispatcher.answer = lambda work: WorkResult(
        work.work_item_id,
        work.request_id,
        work.item_index,
        False,
        error="no",
        error_code=codes[work.item_index],
    )
    response = await client.post(ENCODE, json=BODY)
    assert response.status_code == 500
    assert [d["code"] for d in response.json()["detail"]["details"]] == codes


async def test_no_queue_yet_and_scale_from_zero(gateway) -> None:
    client, state, _ = gateway
    state.workers.update(msgspec.structs.replace(worker(), terminated=True))
    sdk = await client.post(ENCODE, json=BODY, headers={"x-sie-sdk-version": "0.10.1"})
    assert (sdk.status_code, sdk.json()["detail"]["code"], sdk.headers["retry-after"]) == (
        503,
        "PROVISIONING",
        "30",
    )
    old = await client.post(ENCODE, json=BODY)
    assert (old.status_code, old.json()["status"], old.headers["retry-after"]) == (202, "provisioning", "30")
    unconfigured = await client.post(ENCODE, json=BODY, headers={"x-sie-machine-profile": "h100"})
    assert unconfigured.status_code == 503 and unconfigured.json()["status"] == "gpu_not_configured"
    state.dispatcher = None
    state.workers.update(worker())
    closed = await client.post(ENCODE, json=BODY)
    assert (closed.status_code, closed.headers["retry-after"]) == (503, "1")


async def test_openapi_documents_the_inference_routes_and_their_errors(gateway) -> None:
    client, _, _ = gateway
    document = (await client.get("/openapi.json")).json()
    for operation in ("encode", "score", "extract"):
        responses = document["paths"][f"/v1/{operation}/{{model}}"]["post"]["responses"]
        assert {"200", "400", "404", "413", "500", "503"} <= set(responses)
    assert "PROVISIONING" in str(document["paths"]["/v1/encode/{model}"]["post"]["responses"]["503"])
