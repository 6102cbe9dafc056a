"""``INPUT_TOO_LONG`` end to end, from a real ``sie-server`` and from a real cluster (``sie-gateway``,
``nats-server``, queue workers: the session's ``server`` and ``queue_cluster``) serving the packaged
MiniLM (a 256-token window): a text past the window under ``options.overflow_policy: error`` is a 400
``INPUT_TOO_LONG`` that the public ``sie-sdk`` 0.10.1 raises as ``InputTooLongError`` and our SDK
likewise; under ``truncate_text`` the same text is embedded; a bad policy is the public 400
``INVALID_INPUT`` from either front end (the gateway checks it before publishing). A body past the
limit, the other ``INPUT_TOO_LONG`` (413), is tests/e2e/test_bad_input.py's on a real server and
tests/gateway/test_inference.py's on the gateway.
"""

from __future__ import annotations

import textwrap
from typing import Any

import httpx
import numpy as np
import pytest

from sie.sdk import InputTooLongError, RequestError, SIEClient
from tests.e2e.cluster import Gateway
from tests.e2e.conftest import MINILM, Server

LONG = " ".join(["word"] * 400)  # 402 tokens with [CLS] and [SEP]
MESSAGE = (
    "Item 1: The input takes 402 tokens, past the model's 256-token window, and options.overflow_policy is "
    "'error'. Shorten it, or send overflow_policy 'truncate_text'."
)


def url_of(where: str, server: Server, gateway: Gateway) -> str:
    return server.url if where == "server" else gateway.url


def encode(url: str, options: dict[str, Any], texts: list[str] | None = None) -> httpx.Response:
    body = {"items": [{"text": t} for t in texts or ["short", LONG]], "params": {"options": options}}
    return httpx.post(
        f"{url}/v1/encode/{MINILM}", json=body, headers={"accept": "application/json"}, timeout=120
    )


WHERE = pytest.mark.parametrize("where", ["server", "gateway"])


@WHERE
def test_a_text_past_the_window_is_400_input_too_long_on_error(
    server: Server, gateway: Gateway, where: str
) -> None:
    response = encode(url_of(where, server, gateway), {"overflow_policy": "error"})
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == {"code": "INPUT_TOO_LONG", "message": MESSAGE}
    assert response.headers["x-sie-error-code"] == "INPUT_TOO_LONG"


@WHERE
def test_truncate_text_embeds_it_as_the_default_does(server: Server, gateway: Gateway, where: str) -> None:
    url = url_of(where, server, gateway)
    truncated = encode(url, {"overflow_policy": "truncate_text"})
    default = encode(url, {})
    assert truncated.status_code == default.status_code == 200, truncated.text
    vectors = [np.array([i["dense"]["values"] for i in r.json()["items"]]) for r in (truncated, default)]
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-5)


@WHERE
def test_a_bad_policy_is_the_public_400(server: Server, gateway: Gateway, where: str) -> None:
    response = encode(url_of(where, server, gateway), {"overflow_policy": "drop"})
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == "INVALID_INPUT"
    assert response.json()["detail"]["message"] == (
        "Invalid overflow_policy: 'drop'. Must be one of ['default', 'error', 'truncate_text']."
    )


PUBLIC_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import InputTooLongError, RequestError, SIEClient

    url, model, long_text = sys.argv[1:4]
    items = [{"text": "short"}, {"text": long_text}]
    answer = {}
    with SIEClient(url, timeout_s=120) as client:
        try:
            client.encode(model, items, options={"overflow_policy": "error"})
        except InputTooLongError as exc:
            answer["error"] = [type(exc).__name__, exc.code, exc.status_code, str(exc)]
            answer["is_request_error"] = isinstance(exc, RequestError)
        answered = client.encode(model, items, options={"overflow_policy": "truncate_text"})
        answer["truncated"] = len(answered)
    print(json.dumps(answer))
    """
)


@WHERE
def test_the_public_sdk_raises_input_too_long_error(
    server: Server, gateway: Gateway, run_public_sdk: Any, where: str
) -> None:
    answer = run_public_sdk(PUBLIC_SCRIPT, url_of(where, server, gateway), MINILM, LONG)
    assert answer == {
        "error": ["InputTooLongError", "INPUT_TOO_LONG", 400, MESSAGE],
        "is_request_error": True,
        "truncated": 2,
    }


@WHERE
def test_our_sdk_raises_input_too_long_error(server: Server, gateway: Gateway, where: str) -> None:
    items: list[Any] = [{"text": "short"}, {"text": LONG}]
    with SIEClient(url_of(where, server, gateway), timeout_s=120) as client:
        with pytest.raises(InputTooLongError) as info:
            client.encode(MINILM, items, options={"overflow_policy": "error"})
        assert isinstance(info.value, RequestError)
        assert (info.value.code, info.value.status_code, str(info.value)) == ("INPUT_TOO_LONG", 400, MESSAGE)
        assert info.value.model == MINILM
        assert len(client.encode(MINILM, items, options={"overflow_policy": "truncate_text"})) == 2
