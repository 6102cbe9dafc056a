"""The HTTP edge renders every error of the table: the status and ``Retry-After`` of its code, in the
envelope of the process that answers (the server's, the gateway's, sie-config's), the same code the same
way whichever process raised it."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from sie.catalog.config_errors import BundleConflict, ConfigInvalid
from sie.catalog.errors import InvalidInput, ModelNotFound
from sie.engine.errors import ModelLoadFailed, Overloaded
from sie.gateway.errors import GpuNotConfigured, Provisioning, PublishFailed
from sie.http.errors import Envelope, Unauthorized, error_response, install
from sie.wire.codec import WireDecodeError


def body(exc: Exception, envelope: Envelope) -> tuple[int, dict, dict]:
    response = error_response(exc, envelope)
    return response.status_code, json.loads(bytes(response.body)), dict(response.headers)


def test_native_answers_carry_the_code_the_wait_and_the_details() -> None:
    status, answer, headers = body(ModelLoadFailed("m", "no weights", 3, True, "config"), Envelope.NATIVE)
    assert (
        status == 502 and "retry-after" not in headers and headers["x-sie-error-code"] == "MODEL_LOAD_FAILED"
    )
    assert answer == {
        "detail": {
            "code": "MODEL_LOAD_FAILED",
            "message": "Model 'm' failed to load (config): no weights",
            "error_class": "config",
            "attempts": 3,
            "permanent": True,
        }
    }


def test_one_code_one_wait_whichever_process_answers() -> None:
    engine = body(Overloaded("queue full"), Envelope.NATIVE)
    gateway = body(PublishFailed("stream full"), Envelope.GATEWAY)
    assert engine[0] == gateway[0] == 503
    assert engine[2]["retry-after"] == gateway[2]["retry-after"] == "1"
    assert engine[2]["x-sie-error-code"] == gateway[2]["x-sie-error-code"] == "QUEUE_FULL"


def test_the_gateway_puts_the_message_at_the_top_too() -> None:
    status, answer, _ = body(ModelNotFound("x/y"), Envelope.GATEWAY)
    assert status == 404
    assert answer == {
        "message": "Model 'x/y' not found",
        "detail": {"code": "MODEL_NOT_FOUND", "message": "Model 'x/y' not found"},
    }


def test_provisioning_waits_as_the_gateway_is_set_and_gpu_not_configured_keeps_its_shape() -> None:
    status, answer, headers = body(Provisioning(None, "l4", "default", wait_s=30), Envelope.GATEWAY)
    assert (status, headers["retry-after"], answer["detail"]["code"]) == (503, "30", "PROVISIONING")
    assert answer["message"].endswith("retry after 30s")
    status, answer, headers = body(GpuNotConfigured("h100", ["l4"]), Envelope.GATEWAY)
    assert status == 503 and answer["status"] == "gpu_not_configured"
    assert (answer["gpu"], answer["configured_gpu_types"]) == ("h100", ["l4"])


def test_sie_config_answers_its_codes_and_a_bare_auth_detail() -> None:
    status, answer, headers = body(BundleConflict("m", "b", ["default"]), Envelope.CONFIG)
    assert status == 409 and "x-sie-error-code" not in headers
    assert answer["detail"]["error"] == "bundle_conflict"
    assert answer["detail"]["compatible_bundles"] == ["default"]
    status, answer, _ = body(ConfigInvalid([{"message": "bad"}]), Envelope.CONFIG)
    assert (status, answer) == (
        422,
        {"detail": {"error": "validation_error", "details": [{"message": "bad"}]}},
    )
    assert body(Unauthorized("Missing Authorization header"), Envelope.CONFIG)[:2] == (
        401,
        {"detail": "Missing Authorization header"},
    )


@pytest.mark.parametrize("envelope", list(Envelope))
async def test_installed_handlers_answer_the_root_foreign_errors_and_the_rest(
    envelope: Envelope, caplog
) -> None:
    async def refuse(request: Request) -> None:
        raise {"bad": InvalidInput("no"), "body": WireDecodeError("not json"), "bug": KeyError("secret")}[
            request.path_params["what"]
        ]

    app = Starlette(routes=[Route("/{what}", refuse)])
    install(app, envelope)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t"
    ) as client:
        assert (await client.get("/bad")).status_code == 400
        assert (await client.get("/body")).status_code == 400
        bug = await client.get("/bug")
        assert bug.status_code == 500 and "secret" not in bug.text
        missing = await client.get("/nothing/here")
    if envelope is Envelope.CONFIG:  # FastAPI's JSON for a route that does not exist
        assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
