"""Every row of the retry matrix, through both clients, on fake time (``fake_time.sleeps`` is the schedule)."""

from __future__ import annotations

import errno
import ssl

import httpx
import pytest

from sie.sdk import (
    LoraLoadingError,
    ModelLoadFailedError,
    ModelLoadingError,
    ProvisioningError,
    ResourceExhaustedError,
    ServerError,
    SIEConnectionError,
)

from .fakes import FakeServer, call, error, ok_encode, raises

ENCODE = ("encode", "m", {"text": "x"})


def _connect_error(cause: BaseException) -> httpx.ConnectError:
    exc = httpx.ConnectError("connect failed")
    exc.__cause__ = cause
    return exc


# -- 202 / 503 PROVISIONING ---------------------------------------------------------------------


async def test_202_waits_for_capacity_then_succeeds(make_client, fake_time):
    server = FakeServer(
        lambda: httpx.Response(202, headers={"Retry-After": "120"}), error(202, None), ok_encode()
    )
    result = await call(make_client(server, gpu="l4"), *ENCODE)
    assert result["dense"].tolist() == [0.0, 1.0, 2.0]
    assert fake_time.sleeps == [120.0, 5.0]
    assert len(server.requests) == 3


async def test_202_without_waiting_is_a_provisioning_error(make_client, fake_time):
    server = FakeServer(lambda: httpx.Response(202, headers={"Retry-After": "120"}))
    with pytest.raises(ProvisioningError) as caught:
        await call(make_client(server), *ENCODE, gpu="pool/l4", wait_for_capacity=False)
    assert (caught.value.gpu, caught.value.retry_after) == ("l4", 120.0)
    assert fake_time.sleeps == []
    assert len(server.requests) == 1


async def test_503_provisioning_code_is_the_same_row(make_client, fake_time):
    server = FakeServer(error(503, "PROVISIONING", retry_after="30"), ok_encode())
    await call(make_client(server), *ENCODE)
    assert fake_time.sleeps == [30.0]


async def test_provisioning_stops_at_the_budget(make_client, fake_time):
    server = FakeServer(lambda: httpx.Response(202, headers={"Retry-After": "120"}))
    with pytest.raises(ProvisioningError, match="Provisioning timeout") as caught:
        await call(make_client(server, gpu="l4"), *ENCODE, provision_timeout_s=200)
    # The second wait is cut to the 80 s left; one attempt is still owed after it.
    assert fake_time.sleeps == [120.0, 80.0]
    assert len(server.requests) == 3
    assert caught.value.gpu == "l4"


# -- 502 MODEL_LOAD_FAILED ----------------------------------------------------------------------


async def test_model_load_failed_is_raised_at_once(make_client, fake_time):
    server = FakeServer(
        error(502, "MODEL_LOAD_FAILED", "missing dependency", error_class="DEPENDENCY"), ok_encode()
    )
    with pytest.raises(ModelLoadFailedError) as caught:
        await call(make_client(server), *ENCODE)
    assert caught.value.permanent is True
    assert caught.value.attempts == 1
    assert fake_time.sleeps == []
    assert len(server.requests) == 1


async def test_a_502_with_another_code_is_a_plain_server_error(make_client):
    with pytest.raises(ServerError) as caught:
        await call(make_client(FakeServer(error(502, "BAD_GATEWAY"))), *ENCODE)
    assert not isinstance(caught.value, ModelLoadFailedError)
    assert (caught.value.code, caught.value.status_code) == ("BAD_GATEWAY", 502)


# -- 503 LORA_LOADING ---------------------------------------------------------------------------


async def test_lora_loading_retries_every_second_by_default(make_client, fake_time):
    server = FakeServer(error(503, "LORA_LOADING"), error(503, "LORA_LOADING", retry_after="2"), ok_encode())
    await call(make_client(server), *ENCODE, options={"lora_id": "org/adapter"}, wait_for_capacity=False)
    assert fake_time.sleeps == [1.0, 2.0]


async def test_lora_loading_gives_up_after_ten_retries(make_client, fake_time):
    server = FakeServer(error(503, "LORA_LOADING", retry_after="1"))
    with pytest.raises(LoraLoadingError) as caught:
        await call(make_client(server), *ENCODE, options={"lora_id": "org/adapter"})
    assert (caught.value.lora, caught.value.model) == ("org/adapter", "m")
    assert fake_time.sleeps == [1.0] * 10
    assert len(server.requests) == 11


# -- 503 MODEL_LOADING --------------------------------------------------------------------------


async def test_model_loading_is_retried_even_without_wait_for_capacity(make_client, fake_time):
    server = FakeServer(
        error(503, "MODEL_LOADING", retry_after="5"), error(503, "MODEL_LOADING"), ok_encode()
    )
    result = await call(make_client(server), *ENCODE, wait_for_capacity=False)
    assert result["dense"].shape == (3,)
    assert fake_time.sleeps == [5.0, 5.0]


async def test_model_loading_until_the_budget_then_model_loading_error(make_client, fake_time):
    server = FakeServer(error(503, "MODEL_LOADING", retry_after="5"))
    with pytest.raises(ModelLoadingError) as caught:
        await call(make_client(server), "score", "m", {"text": "q"}, [{"text": "d"}], provision_timeout_s=12)
    assert fake_time.sleeps == [5.0, 5.0, 2.0]
    assert len(server.requests) == 4  # the last wait ends on the deadline, and the owed attempt is made
    assert caught.value.model == "m"


# -- 503 RESOURCE_EXHAUSTED ---------------------------------------------------------------------


async def test_oom_first_wait_is_retry_after_then_exponential(make_client, fake_time):
    server = FakeServer(error(503, "RESOURCE_EXHAUSTED", retry_after="3"))
    with pytest.raises(ResourceExhaustedError) as caught:
        await call(make_client(server), *ENCODE, wait_for_capacity=False)
    assert fake_time.sleeps == [3.0, 10.0, 20.0]
    assert (caught.value.retries, caught.value.code, caught.value.status_code) == (
        3,
        "RESOURCE_EXHAUSTED",
        503,
    )
    assert caught.value.retry_after == 3.0
    assert len(server.requests) == 4


async def test_oom_backoff_is_capped_at_thirty_seconds(make_client, fake_time):
    server = FakeServer(error(503, "RESOURCE_EXHAUSTED"))
    with pytest.raises(ResourceExhaustedError):
        await call(make_client(server), *ENCODE, max_oom_retries=5)
    assert fake_time.sleeps == [5.0, 10.0, 20.0, 30.0, 30.0]


async def test_oom_retries_can_be_switched_off(make_client, fake_time):
    server = FakeServer(error(503, "RESOURCE_EXHAUSTED", retry_after="5"))
    with pytest.raises(ResourceExhaustedError) as caught:
        await call(make_client(server), "extract", "m", {"text": "x"}, max_oom_retries=0)
    assert caught.value.retries == 0
    assert fake_time.sleeps == []


async def test_oom_gives_up_early_rather_than_sleep_away_the_budget(make_client, fake_time):
    server = FakeServer(error(503, "RESOURCE_EXHAUSTED"))
    with pytest.raises(ResourceExhaustedError) as caught:
        await call(make_client(server), *ENCODE, provision_timeout_s=12)
    assert fake_time.sleeps == [5.0]  # the next wait (10 s) would not fit in the 7 s left
    assert caught.value.retries == 1


async def test_oom_then_success(make_client, fake_time):
    server = FakeServer(error(503, "RESOURCE_EXHAUSTED", retry_after="1"), ok_encode())
    result = await call(make_client(server), *ENCODE)
    assert result["dense"].tolist() == [0.0, 1.0, 2.0]
    assert fake_time.sleeps == [1.0]


# -- other 503 and 504 --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [503, 504])
async def test_other_capacity_answers_are_retried_when_waiting(make_client, fake_time, status):
    server = FakeServer(error(status, "MODEL_NOT_LOADED"), error(status, None, retry_after="2"), ok_encode())
    await call(make_client(server), *ENCODE)
    assert fake_time.sleeps == [5.0, 2.0]


@pytest.mark.parametrize("status", [503, 504])
async def test_other_capacity_answers_fail_at_once_when_not_waiting(make_client, fake_time, status):
    server = FakeServer(error(status, "MODEL_NOT_LOADED", "queue full"))
    with pytest.raises(ServerError) as caught:
        await call(make_client(server), *ENCODE, wait_for_capacity=False)
    assert (caught.value.code, caught.value.status_code, str(caught.value)) == (
        "MODEL_NOT_LOADED",
        status,
        "queue full",
    )
    assert fake_time.sleeps == []


async def test_other_503_becomes_a_server_error_once_the_budget_is_spent(make_client, fake_time):
    server = FakeServer(error(503, "MODEL_NOT_LOADED"))
    with pytest.raises(ServerError) as caught:
        await call(make_client(server), *ENCODE, provision_timeout_s=7)
    assert fake_time.sleeps == [5.0, 2.0]
    assert caught.value.status_code == 503


async def test_a_4xx_is_never_retried(make_client, fake_time):
    server = FakeServer(error(400, "INVALID_INPUT"), ok_encode())
    with pytest.raises(Exception, match="nope"):
        await call(make_client(server), *ENCODE)
    assert fake_time.sleeps == []
    assert len(server.requests) == 1


# -- transport errors ---------------------------------------------------------------------------


async def test_refused_connection_is_retried_when_waiting(make_client, fake_time):
    refused = raises(lambda: _connect_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused")))
    server = FakeServer(refused, ok_encode())
    await call(make_client(server), *ENCODE)
    assert fake_time.sleeps == [5.0]
    assert len(server.requests) == 2


async def test_refused_connection_without_waiting_is_a_connection_error(make_client, fake_time):
    server = FakeServer(raises(lambda: _connect_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))))
    with pytest.raises(SIEConnectionError) as caught:
        await call(make_client(server), *ENCODE, wait_for_capacity=False)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert fake_time.sleeps == []


@pytest.mark.parametrize(
    "cause", [ssl.SSLError("certificate verify failed"), PermissionError(errno.EACCES, "denied")]
)
async def test_tls_and_permanent_connect_failures_are_not_retried(make_client, fake_time, cause):
    server = FakeServer(raises(lambda: _connect_error(cause)))
    with pytest.raises(SIEConnectionError):
        await call(make_client(server), *ENCODE)
    assert fake_time.sleeps == []


@pytest.mark.parametrize(
    "exc",
    [httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.WriteTimeout, httpx.PoolTimeout],
)
async def test_broken_connections_are_retried_when_waiting(make_client, fake_time, exc):
    server = FakeServer(raises(lambda: exc("peer went away")), ok_encode())
    await call(make_client(server), *ENCODE)
    assert fake_time.sleeps == [5.0]


async def test_a_read_timeout_is_never_retried(make_client, fake_time):
    server = FakeServer(raises(lambda: httpx.ReadTimeout("slow")), ok_encode())
    with pytest.raises(SIEConnectionError, match="not retried"):
        await call(make_client(server), *ENCODE)
    assert fake_time.sleeps == []
    assert len(server.requests) == 1


async def test_connect_retries_stop_at_the_budget(make_client, fake_time):
    server = FakeServer(raises(lambda: httpx.ConnectError("refused")))
    with pytest.raises(ProvisioningError, match="exceeded before request could be sent"):
        await call(make_client(server), *ENCODE, provision_timeout_s=12)
    assert fake_time.sleeps == [5.0, 5.0, 2.0]
    assert len(server.requests) == 3


# -- per-attempt timeouts -----------------------------------------------------------------------


async def test_each_attempt_is_capped_by_what_is_left_of_the_budget(make_client, fake_time):
    server = FakeServer(error(503, "MODEL_LOADING", retry_after="5"), ok_encode())
    await call(make_client(server), *ENCODE, provision_timeout_s=12)
    first, second = (request.extensions["timeout"] for request in server.requests)
    assert (first["connect"], first["read"]) == (10.0, 12.0)
    assert (second["connect"], second["read"]) == (7.0, 7.0)


async def test_timeout_s_sets_both_halves(make_client):
    server = FakeServer(ok_encode())
    await call(make_client(server, timeout_s=3.0), *ENCODE)
    timeout = server.requests[0].extensions["timeout"]
    assert (timeout["connect"], timeout["read"]) == (3.0, 3.0)
