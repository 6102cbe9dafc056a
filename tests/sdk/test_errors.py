"""Error answers become the public SDK's exception classes, with ``code`` and ``status_code`` filled in."""

from __future__ import annotations

import httpx
import msgpack
import pytest

import sie.sdk as sdk
from sie.sdk import ModelLoadFailedError, ProvisioningError, RequestError, ServerError

from .fakes import FakeServer, as_json, call, error


async def test_400_json_detail_is_a_request_error(make_client):
    server = FakeServer(error(400, "INVALID_INPUT", "items must not be empty", param="items"))
    with pytest.raises(RequestError) as caught:
        await call(make_client(server), "encode", "m", [])
    assert str(caught.value) == "items must not be empty"
    assert caught.value.code == "INVALID_INPUT"
    assert caught.value.status_code == 400
    assert caught.value.param == "items"
    assert len(server.requests) == 1


async def test_404_msgpack_detail_is_a_request_error(make_client):
    body = msgpack.packb({"detail": {"code": "MODEL_NOT_FOUND", "message": "no model x"}}, use_bin_type=True)
    answer = lambda: httpx.Response(404, content=body, headers={"content-type": "application/msgpack"})  # noqa: E731
    with pytest.raises(RequestError) as caught:
        await call(make_client(FakeServer(answer)), "encode", "x", {"text": "a"})
    assert (str(caught.value), caught.value.code, caught.value.status_code) == (
        "no model x",
        "MODEL_NOT_FOUND",
        404,
    )


async def test_500_gateway_error_object_is_a_server_error(make_client):
    server = FakeServer(as_json({"error": {"code": "INFERENCE_ERROR", "message": "boom"}}, 500))
    with pytest.raises(ServerError) as caught:
        await call(make_client(server), "score", "m", {"text": "q"}, [{"text": "d"}])
    assert (str(caught.value), caught.value.code, caught.value.status_code) == (
        "boom",
        "INFERENCE_ERROR",
        500,
    )


async def test_draining_server_string_error_becomes_the_message(make_client):
    body = {"error": "Service shutting down", "detail": "try another replica"}
    server = FakeServer(as_json(body, 503, {"Retry-After": "5"}))
    with pytest.raises(ServerError) as caught:
        await call(make_client(server), "encode", "m", {"text": "a"}, wait_for_capacity=False)
    assert str(caught.value) == "Service shutting down"
    assert caught.value.code is None
    assert caught.value.status_code == 503
    assert caught.value.retry_after == 5.0


async def test_plain_text_body_is_kept_as_the_message(make_client):
    server = FakeServer(lambda: httpx.Response(500, text="Internal Server Error"))
    with pytest.raises(ServerError, match="Internal Server Error") as caught:
        await call(make_client(server), "extract", "m", {"text": "a"})
    assert caught.value.code is None


async def test_error_code_header_wins_over_the_body(make_client):
    server = FakeServer(
        as_json({"detail": {"code": "X", "message": "m"}}, 409, {"X-SIE-Error-Code": "CONFLICT"})
    )
    with pytest.raises(RequestError) as caught:
        await call(make_client(server), "encode", "m", {"text": "a"})
    assert caught.value.code == "CONFLICT"


async def test_model_load_failed_carries_the_servers_diagnosis(make_client):
    server = FakeServer(
        error(502, "MODEL_LOAD_FAILED", "gated repo", error_class="GATED", permanent=False, attempts=2)
    )
    with pytest.raises(ModelLoadFailedError) as caught:
        await call(make_client(server), "encode", "org/gated", {"text": "a"})
    failure = caught.value
    assert isinstance(failure, ModelLoadFailedError)
    assert isinstance(failure, ServerError)
    assert (failure.code, failure.status_code) == ("MODEL_LOAD_FAILED", 502)
    assert (failure.model, failure.error_class, failure.permanent, failure.attempts) == (
        "org/gated",
        "GATED",
        False,
        2,
    )
    assert str(failure) == "gated repo"


async def test_get_model_404_is_a_request_error(make_client):
    server = FakeServer(error(404, "MODEL_NOT_FOUND", "unknown model"))
    with pytest.raises(RequestError) as caught:
        await call(make_client(server), "get_model", "nope")
    assert (caught.value.code, caught.value.status_code) == ("MODEL_NOT_FOUND", 404)


async def test_list_models_503_provisioning_is_a_provisioning_error(make_client):
    server = FakeServer(error(503, "provisioning", "scaling up", retry_after="30"))
    with pytest.raises(ProvisioningError) as caught:
        await call(make_client(server), "list_models")
    assert caught.value.retry_after == 30.0


async def test_a_redirect_is_not_followed_but_reported(make_client):
    server = FakeServer(lambda: httpx.Response(307, headers={"Location": "http://elsewhere/"}))
    with pytest.raises(RequestError) as caught:
        await call(make_client(server), "encode", "m", {"text": "a"})
    assert caught.value.status_code == 307
    assert len(server.requests) == 1


def test_the_exception_tree_matches_the_public_sdk():
    for name in ("SIEConnectionError", "RequestError", "ServerError", "ProvisioningError", "PoolError"):
        assert issubclass(getattr(sdk, name), sdk.SIEError)
    for name in ("LoraLoadingError", "ModelLoadingError"):
        assert issubclass(getattr(sdk, name), sdk.SIEError)
        assert not issubclass(getattr(sdk, name), sdk.ServerError)
    assert issubclass(sdk.ModelLoadFailedError, sdk.ServerError)
    assert issubclass(sdk.ResourceExhaustedError, sdk.ServerError)


def test_constructors_take_the_public_arguments():
    assert vars(sdk.RequestError("m", "CODE", 400, param="p")) == {
        "code": "CODE",
        "status_code": 400,
        "param": "p",
        "request": None,
    }
    server = sdk.ServerError("m", "C", 503, retry_after=2.0)
    assert (server.code, server.status_code, server.retry_after) == ("C", 503, 2.0)
    exhausted = sdk.ResourceExhaustedError("m", model="x", retries=3, retry_after=1.0)
    assert (exhausted.code, exhausted.status_code, exhausted.model, exhausted.retries) == (
        "RESOURCE_EXHAUSTED",
        503,
        "x",
        3,
    )
    assert (
        sdk.ProvisioningError("m", gpu="l4", retry_after=9.0).gpu,
        sdk.PoolError("m", pool_name="p").pool_name,
    ) == (
        "l4",
        "p",
    )
    assert (
        sdk.LoraLoadingError("m", lora="a", model="b").lora,
        sdk.ModelLoadingError("m", model="b").model,
    ) == (
        "a",
        "b",
    )
