"""The retry policy on its own: no client, no clock, just answers in and delays (or errors) out."""

from __future__ import annotations

import errno
import math
import ssl
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from sie.sdk import LoraLoadingError, ModelLoadingError, ProvisioningError, ResourceExhaustedError
from sie.sdk._retry import (
    RetryLimits,
    RetryPolicy,
    downward_jitter,
    is_transient_connect_error,
    parse_retry_after,
)


def policy(**limits: Any) -> RetryPolicy:
    return RetryPolicy(RetryLimits(**limits), model="m", gpu="l4", lora="a", jitter=lambda d: d)


@pytest.mark.parametrize("status", [200, 201, 400, 404, 422, 500, 502])
def test_final_answers_need_no_retry(status):
    assert policy().after_response(status, "MODEL_LOAD_FAILED" if status == 502 else None, None, 0.0) is None


def test_every_loading_row_keeps_its_own_counter():
    retry = policy()
    assert retry.after_response(503, "LORA_LOADING", None, 0.0) == 1.0
    assert retry.after_response(503, "RESOURCE_EXHAUSTED", None, 1.0) == 5.0
    assert retry.after_response(503, "LORA_LOADING", None, 6.0) == 1.0
    assert retry.after_response(503, "RESOURCE_EXHAUSTED", None, 7.0) == 10.0
    assert (retry.lora_retries, retry.oom_retries) == (2, 2)


def test_lora_budget_is_ten_retries():
    retry = policy()
    assert [retry.after_response(503, "LORA_LOADING", 0.5, 0.0) for _ in range(10)] == [0.5] * 10
    with pytest.raises(LoraLoadingError, match="after 11 retries"):
        retry.after_response(503, "LORA_LOADING", 0.5, 0.0)


def test_model_loading_sleep_never_passes_the_deadline():
    retry = policy(provision_timeout_s=100.0)
    assert retry.after_response(503, "MODEL_LOADING", 30.0, 90.0) == 10.0
    with pytest.raises(ModelLoadingError):
        retry.after_response(503, "MODEL_LOADING", 30.0, 100.0)


def test_oom_first_hint_is_capped_at_thirty_seconds():
    assert policy().after_response(503, "RESOURCE_EXHAUSTED", 120.0, 0.0) == 30.0


def test_oom_zero_hint_still_backs_off():
    retry = policy()
    assert retry.after_response(503, "RESOURCE_EXHAUSTED", 0.0, 0.0) == 0.0
    assert retry.after_response(503, "RESOURCE_EXHAUSTED", 0.0, 0.0) == 10.0


def test_oom_with_no_retries_left_reports_how_many_were_made():
    retry = policy(max_oom_retries=1)
    retry.after_response(503, "RESOURCE_EXHAUSTED", None, 0.0)
    with pytest.raises(ResourceExhaustedError) as caught:
        retry.after_response(503, "RESOURCE_EXHAUSTED", 4.0, 5.0)
    assert (caught.value.retries, caught.value.retry_after, caught.value.model) == (1, 4.0, "m")


def test_attempt_cap_is_the_budget_left_and_one_attempt_is_owed_after_a_capacity_wait():
    retry = policy(provision_timeout_s=10.0)
    assert retry.attempt_cap(4.0) == 6.0
    with pytest.raises(ProvisioningError):
        retry.attempt_cap(10.0)
    retry.after_response(503, "MODEL_LOADING", 5.0, 5.0)
    assert retry.attempt_cap(10.0) == math.inf  # owed: runs on the client's own timeouts
    with pytest.raises(ProvisioningError):
        retry.attempt_cap(10.0)  # but only once


def test_transport_retries_need_wait_for_capacity():
    assert policy(wait_for_capacity=False).after_transport_error(httpx.ReadError("x"), 0.0) is None
    assert policy().after_transport_error(httpx.ReadError("x"), 0.0) == 5.0
    assert policy().after_transport_error(httpx.ReadTimeout("x"), 0.0) is None
    assert policy(provision_timeout_s=3.0).after_transport_error(httpx.ReadError("x"), 1.0) == 2.0


def test_transient_connect_errors_are_judged_by_errno():
    def chained(cause: BaseException) -> httpx.ConnectError:
        error = httpx.ConnectError("failed")
        error.__cause__ = cause
        return error

    assert is_transient_connect_error(chained(OSError(errno.ECONNREFUSED, "refused")))
    assert is_transient_connect_error(chained(OSError(errno.EHOSTUNREACH, "no route")))
    assert not is_transient_connect_error(chained(OSError(errno.EACCES, "denied")))
    assert not is_transient_connect_error(chained(ssl.SSLError("bad cert")))
    assert is_transient_connect_error(httpx.ConnectError("no errno at all"))


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("5", 5.0),
        ("0", 0.0),
        ("2.5", 2.5),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("", None),
    ],
)
def test_retry_after_parsing(header, expected):
    assert parse_retry_after(httpx.Headers({"Retry-After": header})) == expected


def test_retry_after_as_an_http_date():
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    seconds = parse_retry_after(httpx.Headers({"Retry-After": when}))
    assert seconds is not None
    assert 55.0 <= seconds <= 60.0
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=60), usegmt=True)
    assert parse_retry_after(httpx.Headers({"Retry-After": past})) == 0.0


def test_jitter_only_shortens_a_delay():
    samples = [downward_jitter(8.0) for _ in range(200)]
    assert all(6.0 <= sample <= 8.0 for sample in samples)
    assert len(set(samples)) > 1
    assert downward_jitter(0.0) == 0.0
