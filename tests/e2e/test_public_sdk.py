"""The PUBLIC ``sie-sdk==0.10.1`` (PyPI) against our server, compared with our own ``sie.sdk``.

The public SDK needs Python >= 3.12, so it runs in a venv of its own (the ``run_public_sdk`` fixture
of ``tests/conftest.py``, which builds ``$SIE_PUBLIC_SDK_VENV`` once). One script run in that venv
makes every call and prints the results as JSON; the tests then make the same calls with our SDK
and compare. The script also calls a model that is not preloaded: the public SDK must get through the
server's ``503 MODEL_LOADING`` + ``Retry-After`` on its own.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

import httpx
import numpy as np
import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
COLD_MODEL = "senthilthepro/sre-embedding-model"
OUTPUT_DTYPES = ["float32", "float16", "int8", "uint8", "binary"]
ITEMS = [{"text": "first document", "id": "a"}, {"text": "second document"}, {"text": "third", "id": "c"}]

# Every call the comparison covers: (name, model, items, keyword arguments). The script and the tests
# both read this list, so the two SDKs make exactly the same calls.
CALLS: list[tuple[str, str, Any, dict[str, Any]]] = [
    ("single", MODEL, {"text": "hello world"}, {}),
    ("single-with-id", MODEL, {"text": "hello world", "id": "only"}, {}),
    ("list", MODEL, ITEMS, {}),
    ("list-query", MODEL, ITEMS, {"is_query": True}),
    *(
        (f"dtype-{d}", MODEL, [{"text": "hello world", "id": "q"}], {"output_dtype": d})
        for d in OUTPUT_DTYPES
    ),
    ("query-int8", MODEL, ITEMS[:2], {"is_query": True, "output_dtype": "int8"}),
]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import SIEClient

    url, calls, cold_model = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]

    def dump(result):
        dense = result["dense"]
        return {
            "keys": sorted(result),
            "id": result.get("id"),
            "model": result.get("model"),
            "request": result.get("request"),
            "dtype": str(dense.dtype),
            "shape": list(dense.shape),
            "dense": dense.tolist(),
        }

    out = {}
    with SIEClient(url, timeout_s=120) as client:
        for name, model, items, kwargs in calls:
            result = client.encode(model, items, **kwargs)
            out[name] = [dump(r) for r in result] if isinstance(result, list) else dump(result)
        out["cold"] = dump(client.encode(cold_model, {"text": "disk pressure on the node"}))
    print(json.dumps(out))
    """
)


def _model_state(server, model: str) -> str:
    return server.client.get(f"/v1/models/{model}").json()["state"]


@pytest.fixture(scope="module")
def public_results(server, run_public_sdk) -> dict[str, Any]:
    assert _model_state(server, COLD_MODEL) == "available", (
        "the cold model must not be loaded before this test"
    )
    return run_public_sdk(SCRIPT, server.url, json.dumps(CALLS), COLD_MODEL)


@pytest.fixture(scope="module")
def our_client(server):
    from sie.sdk import SIEClient

    with SIEClient(server.url, timeout_s=120) as client:
        yield client


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _assert_same_vector(public: dict[str, Any], ours: np.ndarray) -> None:
    assert str(ours.dtype) == public["dtype"]
    assert list(ours.shape) == public["shape"]
    expected = np.asarray(public["dense"], dtype=ours.dtype)
    if ours.dtype.kind == "f":
        np.testing.assert_allclose(ours, expected, atol=1e-6)
    else:
        np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize(("name", "model", "items", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_our_sdk_returns_what_the_public_sdk_returns(
    public_results, our_client, name, model, items, kwargs
) -> None:
    public = public_results[name]
    ours = our_client.encode(model, items, **kwargs)
    assert isinstance(ours, list) == isinstance(public, list)
    for pub, mine in zip(_as_list(public), _as_list(ours), strict=True):
        assert mine.get("id") == pub["id"]
        assert mine.get("model") == pub["model"]
        _assert_same_vector(pub, mine["dense"])


@pytest.mark.parametrize(("name", "model", "items", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_public_sdk_returns_the_raw_wire_vectors(server, public_results, name, model, items, kwargs) -> None:
    """The public SDK decodes our msgpack into what our JSON says (ids, dtypes and values)."""
    params: dict[str, Any] = {}
    if "output_dtype" in kwargs:
        params["output_dtype"] = kwargs["output_dtype"]
    if kwargs.get("is_query"):
        params["options"] = {"is_query": True}
    body: dict[str, Any] = {"items": _as_list(items)}
    if params:
        body["params"] = params
    response = server.client.post(f"/v1/encode/{model}", json=body, headers={"accept": "application/json"})
    assert response.status_code == 200, response.text
    for pub, raw in zip(_as_list(public_results[name]), response.json()["items"], strict=True):
        assert pub["id"] == raw.get("id")
        np.testing.assert_allclose(
            np.asarray(pub["dense"], dtype=np.float64), raw["dense"]["values"], atol=1e-6
        )


def test_result_keys_match_the_public_sdk(public_results, our_client) -> None:
    """A drop-in client returns the same dict keys (the public one adds ``request`` from headers)."""
    ours = our_client.encode(MODEL, {"text": "hello world", "id": "only"})
    assert sorted(ours) == public_results["single-with-id"]["keys"]


def test_public_sdk_reads_our_identity_headers(server, public_results) -> None:
    instance = server.client.get("/healthz").headers["x-sie-runtime-instance"]
    assert re.match(r"^[0-9a-f]{64}$", instance)
    assert public_results["single"]["request"] == {"runtime_instance_id": instance, "served_by": "local"}


def test_public_sdk_retries_model_loading(server, public_results, cosine) -> None:
    cold = public_results["cold"]
    assert cold["model"] == COLD_MODEL
    assert cold["shape"] == [384]
    assert abs(float(np.linalg.norm(cold["dense"])) - 1.0) < 1e-5
    assert _model_state(server, COLD_MODEL) == "loaded"
    # The server said 503 first and the SDK came back on its own (every answer is counted).
    metrics = server.client.get("/metrics").text
    for status in ("503", "200"):
        line = rf'^sie_requests_total\{{endpoint="encode",model="{re.escape(COLD_MODEL)}",status="{status}"\}} [1-9]'
        assert re.search(line, metrics, re.MULTILINE), f"no {status} answer for the cold model counted"
    with httpx.Client(base_url=server.url, timeout=60) as client:
        again = client.post(
            f"/v1/encode/{COLD_MODEL}",
            json={"items": [{"text": "disk pressure on the node"}]},
            headers={"accept": "application/json"},
        )
    assert again.status_code == 200
    assert (
        cosine(np.asarray(cold["dense"]), np.asarray(again.json()["items"][0]["dense"]["values"])) >= 0.99999
    )
