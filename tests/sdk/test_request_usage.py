"""The request's ``usage`` read from the ``X-SIE-Units-*`` headers, as the public SDK reads them: only
canonical unsigned decimals count, and a malformed meter is left out without its neighbours."""

from __future__ import annotations

import httpx
import pytest

from sie.sdk._decode import request_metadata


def test_every_meter_the_server_sends_is_read() -> None:
    headers = httpx.Headers(
        {
            "X-SIE-Units-Input-Tokens": "42",
            "X-SIE-Units-Images": "0",
            "X-SIE-Units-Content-Input-Tokens": "30",
            "X-SIE-Served-By": "local",
        }
    )
    assert request_metadata(headers) == {
        "served_by": "local",
        "usage": {"input_tokens": 42, "images": 0, "content_input_tokens": 30},
    }


@pytest.mark.parametrize("value", ["-1", "+1", " 1", "01", "1e3", "1.0", "", str(1 << 64), "x"])
def test_a_malformed_meter_is_left_out_alone(value: str) -> None:
    headers = httpx.Headers({"X-SIE-Units-Input-Tokens": value, "X-SIE-Units-Images": "2"})
    assert request_metadata(headers) == {"usage": {"images": 2}}


def test_no_meters_no_usage() -> None:
    assert request_metadata(httpx.Headers({"X-SIE-Units-Pages": "3"})) is None
