"""``INPUT_TOO_LONG`` end to end, from a real ``sie-server`` and from a real cluster (``sie-gateway``,
``nats-server``, one queue worker) serving the packaged MiniLM (a 256-token window): a text past the
window under ``options.overflow_policy: error`` is a 400 ``INPUT_TOO_LONG`` that the public
``sie-sdk`` 0.10.1 raises as ``InputTooLongError`` and our SDK likewise; under ``truncate_text`` the
same text is embedded; a bad policy is the public 400 ``INVALID_INPUT`` from either front end (the
gateway checks it before publishing); a body past the limit is 413 ``INPUT_TOO_LONG``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from sie.sdk import InputTooLongError, RequestError, SIEClient
from tests.conftest import running_nats
from tests.e2e.cluster import Gateway, run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM, Server, run_server

LONG = " ".join(["word"] * 400)  # 402 tokens with [CLS] and [SEP]
MESSAGE = (
    "Item 1: The input takes 402 tokens, past the model's 256-token window, and options.overflow_policy is "
    "'error'. Shorten it, or send overflow_policy 'truncate_text'."
)
BODY_LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def minilm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"SIE_MAX_REQUEST_BODY_BYTES": str(BODY_LIMIT)}
    with run_server(tmp_path_factory.mktemp("too-long-server"), env) as running:
        yield running


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("too-long-cluster")
    with running_nats(root) as nats, run_worker(root / "w1", worker_env(nats.url, "w1")):
        gateway_env = {
            "SIE_NATS_URL": nats.url,
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
            "SIE_MAX_REQUEST_BODY_BYTES": str(BODY_LIMIT),
        }
        with run_gateway(root / "gateway", gateway_env) as running:
            running.wait_for_workers(1, [MINILM])
            yield running


def url_of(where: str, minilm_server: Server, gateway: Gateway) -> str:
    return minilm_server.url if where == "server" else gateway.url


def encode(url: str, options: dict[str, Any], texts: list[str] | None = None) -> httpx.Response:
    body = {"items": [{"text": t} for t in texts or ["short", LONG]], "params": {"options": options}}
    return httpx.post(
        f"{url}/v1/encode/{MINILM}", json=body, headers={"accept": "application/json"}, timeout=120
    )


WHERE = pytest.mark.parametrize("where", ["server", "gateway"])


@WHERE
def test_a_text_past_the_window_is_400_input_too_long_on_error(
    minilm_server: Server, gateway: Gateway, where: str
) -> None:
    response = encode(url_of(where, minilm_server, gateway), {"overflow_policy": "error"})
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == {"code": "INPUT_TOO_LONG", "message": MESSAGE}
    assert response.headers["x-sie-error-code"] == "INPUT_TOO_LONG"


@WHERE
def test_truncate_text_embeds_it_as_the_default_does(
    minilm_server: Server, gateway: Gateway, where: str
) -> None:
    url = url_of(where, minilm_server, gateway)
    truncated = encode(url, {"overflow_policy": "truncate_text"})
    default = encode(url, {})
    assert truncated.status_code == default.status_code == 200, truncated.text
    vectors = [np.array([i["dense"]["values"] for i in r.json()["items"]]) for r in (truncated, default)]
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-5)


@WHERE
def test_a_bad_policy_is_the_public_400(minilm_server: Server, gateway: Gateway, where: str) -> None:
    response = encode(url_of(where, minilm_server, gateway), {"overflow_policy": "drop"})
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == "INVALID_INPUT"
    assert response.json()["detail"]["message"] == (
        "Invalid overflow_policy: 'drop'. Must be one of ['default', 'error', 'truncate_text']."
    )


@WHERE
def test_a_body_past_the_limit_is_413_input_too_long(
    minilm_server: Server, gateway: Gateway, where: str
) -> None:
    response = encode(url_of(where, minilm_server, gateway), {}, ["x" * (BODY_LIMIT + 1)])
    assert response.status_code == 413, response.text
    assert response.json()["detail"]["code"] == "INPUT_TOO_LONG"
    assert response.headers["x-sie-error-code"] == "INPUT_TOO_LONG"


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
    minilm_server: Server, gateway: Gateway, run_public_sdk: Any, where: str
) -> None:
    answer = run_public_sdk(PUBLIC_SCRIPT, url_of(where, minilm_server, gateway), MINILM, LONG)
    assert answer == {
        "error": ["InputTooLongError", "INPUT_TOO_LONG", 400, MESSAGE],
        "is_request_error": True,
        "truncated": 2,
    }


@WHERE
def test_our_sdk_raises_input_too_long_error(minilm_server: Server, gateway: Gateway, where: str) -> None:
    items: list[Any] = [{"text": "short"}, {"text": LONG}]
    with SIEClient(url_of(where, minilm_server, gateway), timeout_s=120) as client:
        with pytest.raises(InputTooLongError) as info:
            client.encode(MINILM, items, options={"overflow_policy": "error"})
        assert isinstance(info.value, RequestError)
        assert (info.value.code, info.value.status_code, str(info.value)) == ("INPUT_TOO_LONG", 400, MESSAGE)
        assert info.value.model == MINILM
        assert len(client.encode(MINILM, items, options={"overflow_policy": "truncate_text"})) == 2
