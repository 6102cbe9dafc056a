"""Remote serving against a real upstream: a second instance of our own server, under uvicorn on
loopback with token auth, serving ``/v1/embeddings`` and ``/v1/rerank``. The server under test runs in
process (``served``) with an upstreams file naming it, and reaches it over real HTTP.

What the public server does and this one must: a ``routing.policy: fallback`` model answers from the
upstream while its local model loads (``X-SIE-Served-By: remote``, the upstream's own values) and
locally after; ``X-SIE-Remote: forbid`` keeps a request local (and refuses a remote-only model 400);
a remote-only model is served by its upstream on ``/v1/encode``, ``/v1/embeddings``, ``/v1/score``
and ``/v1/rerank``; an upstream that is down answers 503 ``QUEUE_FULL``, and a bridged request whose
remote attempt fails answers the local refusal with the ``X-SIE-Fallback-*`` headers. The public
``openai`` client reads a remote answer unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette

from sie.server.app import create_app
from sie.settings.server import Settings
from tests import builders
from tests.inprocess import served

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
RERANKER = "test/reranker"
TOKEN = "upstream-secret-token"
KEY_VAR = "SIE_TEST_UPSTREAM_KEY"
TEXTS = ["the cat sat on the mat", "remote serving spills to a hosted API"]
QUERY = "what causes high blood pressure"
DOCUMENTS = ["Hypertension is often caused by stress and salt.", "The film ran for three hours."]
REMOTE = "sie_server.adapters.remote.openai:OpenAIUpstreamAdapter"
LOCAL = "sie.adapters.dense_torch:TorchDenseEncoder"
UPSTREAM_BODY_LIMIT = 16 << 10

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _remote_profile(upstream: str, model: str) -> str:
    return (
        f"{{adapter_path: {REMOTE}, max_batch_tokens: 4096, "
        f"adapter_options: {{loadtime: {{upstream: {upstream}, upstream_model: '{model}'}}}}}}"
    )


def _hybrid(sie_id: str, upstream: str, triggers: str = "") -> str:
    return (
        f"sie_id: {sie_id}\nhf_id: {MINILM}\ntasks: {{encode: {{dense: {{dim: 384}}}}}}\n"
        f"max_sequence_length: 256\nrouting: {{policy: fallback, fallback_profile: hosted{triggers}}}\n"
        "profiles:\n"
        f"  default: {{adapter_path: {LOCAL}, max_batch_tokens: 4096, "
        "adapter_options: {runtime: {pooling: mean, normalize: true}}}\n"
        f"  hosted: {_remote_profile(upstream, MINILM)}\n"
    )


def _hosted(sie_id: str, upstream: str, model: str, tasks: str) -> str:
    return (
        f"sie_id: {sie_id}\nremote_backed: true\nrouting: {{policy: remote_only}}\ntasks: {tasks}\n"
        f"profiles:\n  default: {_remote_profile(upstream, model)}\n"
    )


@contextlib.asynccontextmanager
async def _listening(app: Starlette) -> AsyncIterator[int]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn stopped before it listened"
        await asyncio.sleep(0.02)
    try:
        yield int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        await task


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("remote")
    upstream, front = root / "upstream-models", root / "front-models"
    upstream.mkdir()
    front.mkdir()
    weights = builders.bert_reranker(splade_dir, root / "reranker-weights")
    shipped = Path(__file__).parents[2] / "src/sie/models/sentence-transformers__all-MiniLM-L6-v2.yaml"
    (upstream / "minilm.yaml").write_text(shipped.read_text())
    (upstream / "reranker.yaml").write_text(
        f"sie_id: {RERANKER}\nweights_path: {weights}\ntasks: {{score: {{}}}}\nmax_sequence_length: 256\n"
        "profiles: {default: {max_batch_tokens: 4096, adapter_path: sie.adapters.cross_encoder:CrossEncoderScorer}}\n"
    )
    models = {
        "hybrid": _hybrid("org/hybrid", "loop"),
        "forbidden": _hybrid("org/forbidden", "loop"),
        "stranded": _hybrid("org/stranded", "down"),
        "embedder": _hosted("org/embedder", "loop", MINILM, "{encode: {dense: {dim: 384}}}"),
        "reranker": _hosted("org/reranker", "loop", RERANKER, "{score: {}}"),
        "dead": _hosted("org/dead", "down", MINILM, "{encode: {dense: {dim: 384}}}"),
        "nowhere": _hosted("org/nowhere", "undefined", MINILM, "{encode: {dense: {dim: 384}}}"),
        "listed": _hosted("org/listed", "loop", MINILM, "{encode: {dense: {dim: 384}}}"),
        "local": (
            f"sie_id: org/local\nhf_id: {MINILM}\ntasks: {{encode: {{dense: {{dim: 384}}}}}}\n"
            f"profiles: {{default: {{adapter_path: {LOCAL}, max_batch_tokens: 4096}}}}\n"
        ),
    }
    for name, text in models.items():
        (front / f"{name}.yaml").write_text(text)
    return upstream, front


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def upstream(folders: tuple[Path, Path]) -> AsyncIterator[httpx.AsyncClient]:
    """Our own server as the upstream: token auth on, both models loaded before it listens."""
    settings = Settings(
        models_dir=str(folders[0]),
        preload_models=f"{MINILM},{RERANKER}",
        hot_reload=False,
        default_compute_precision="float32",
        auth_mode="token",
        auth_tokens=TOKEN,
        max_request_body_bytes=UPSTREAM_BODY_LIMIT,  # a longer input is its own 413 INPUT_TOO_LONG
    )
    async with _listening(create_app(settings)) as port:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as c:
            yield c


@pytest.fixture(scope="module")
def upstreams_file(upstream: httpx.AsyncClient, tmp_path_factory: pytest.TempPathFactory) -> Path:
    file = tmp_path_factory.mktemp("upstreams") / "upstreams.yaml"
    file.write_text(
        "upstreams:\n"
        "  loop:\n"
        "    kind: openai\n"
        f"    base_url: {str(upstream.base_url).rstrip('/')}/v1\n"
        f"    api_key_secret: {KEY_VAR}\n"
        "    rate_cap: {requests_per_minute: 6000, max_concurrency: 8}\n"
        "    endpoints: [embeddings, rerank]\n"
        "  down:\n"
        "    kind: openai\n"
        f"    base_url: http://127.0.0.1:{_closed_port()}/v1\n"
        "    rate_cap: {requests_per_minute: 600, max_concurrency: 2}\n"
        "    endpoints: [embeddings]\n"
    )
    return file


@contextlib.asynccontextmanager
async def _front(
    models: Path, upstreams: Path, remote_serving: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(KEY_VAR, TOKEN)
        settings = Settings(
            models_dir=str(models),
            upstreams_file=upstreams,
            remote_serving=remote_serving,
            hot_reload=False,
            default_compute_precision="float32",
        )
        async with served(create_app(settings), timeout=60) as client:
            yield client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def front(folders: tuple[Path, Path], upstreams_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with _front(folders[1], upstreams_file) as client:
        yield client


async def _upstream_vectors(upstream: httpx.AsyncClient, texts: list[str]) -> np.ndarray:
    answer = await upstream.post("/v1/embeddings", json={"model": MINILM, "input": texts})
    assert answer.status_code == 200, answer.text
    return np.array([row["embedding"] for row in answer.json()["data"]], dtype=np.float32)


def _dense(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([item["dense"]["values"] for item in response.json()["items"]], dtype=np.float32)


async def _encode(front: httpx.AsyncClient, model: str, **headers: str) -> httpx.Response:
    body = {"items": [{"id": str(i), "text": t} for i, t in enumerate(TEXTS)]}
    return await front.post(
        f"/v1/encode/{model}", json=body, headers={"accept": "application/json", **headers}
    )


async def test_fallback_answers_from_the_upstream_while_loading_and_locally_after(
    front: httpx.AsyncClient, upstream: httpx.AsyncClient
):
    expected = await _upstream_vectors(upstream, TEXTS)
    first = await _encode(front, "org/hybrid")
    assert first.headers["x-sie-served-by"] == "remote"
    assert first.headers["x-sie-upstream"] == "loop"
    assert first.headers["x-sie-fallback-reason"] == "model_loading"
    body = first.json()
    assert body["model"] == "org/hybrid" and [item["id"] for item in body["items"]] == ["0", "1"]
    np.testing.assert_array_equal(_dense(first), expected)
    assert body["usage"]["input_tokens"] > 0  # the upstream's own count
    # The refusal started the local load: once it is done the same request is served here.
    for _ in range(600):
        later = await _encode(front, "org/hybrid")
        if later.headers["x-sie-served-by"] == "local":
            break
        await asyncio.sleep(0.1)
    assert later.headers["x-sie-served-by"] == "local"
    assert "x-sie-upstream" not in later.headers and "x-sie-fallback-reason" not in later.headers
    np.testing.assert_allclose(_dense(later), expected, atol=1e-5)  # same weights, run here


async def test_forbid_keeps_a_fallback_model_local_and_refuses_a_remote_only_one(front: httpx.AsyncClient):
    refused = await _encode(front, "org/forbidden", **{"X-SIE-Remote": "forbid"})
    assert refused.status_code == 503, refused.text
    assert refused.json()["detail"]["code"] == "MODEL_LOADING"
    # No bridge: the local refusal as the public server sends it, with no disclosure headers.
    assert not {"x-sie-served-by", "x-sie-fallback-reason", "x-sie-fallback-error"} & set(refused.headers)
    remote_only = await _encode(front, "org/embedder", **{"X-SIE-Remote": "forbid"})
    assert remote_only.status_code == 400
    assert remote_only.json()["detail"] == {
        "code": "INVALID_INPUT",
        "message": "Model 'org/embedder' is served only by an upstream, which X-SIE-Remote: forbid refuses",
    }
    other = await _encode(front, "org/embedder", **{"X-SIE-Remote": "prefer"})
    assert other.status_code == 400
    assert other.json()["detail"]["message"] == "X-SIE-Remote accepts only 'forbid'"
    # Extract reads the header too (no upstream extracts): a bad value is the same 400, forbid a no-op.
    extract = await front.post(
        "/v1/extract/org/local", json={"items": [{"text": "x"}]}, headers={"X-SIE-Remote": "prefer"}
    )
    assert extract.status_code == 400
    assert extract.json()["detail"]["message"] == "X-SIE-Remote accepts only 'forbid'"


async def test_a_remote_only_model_encodes_through_its_upstream(
    front: httpx.AsyncClient, upstream: httpx.AsyncClient
):
    expected = await _upstream_vectors(upstream, TEXTS)
    answer = await _encode(front, "org/embedder")
    assert (answer.headers["x-sie-served-by"], answer.headers["x-sie-upstream"]) == ("remote", "loop")
    assert "x-sie-fallback-reason" not in answer.headers
    np.testing.assert_array_equal(_dense(answer), expected)
    packed = await front.post(
        "/v1/encode/org/embedder",
        json={"items": [{"text": TEXTS[0]}], "params": {"output_dtype": "int8"}},
        headers={"accept": "application/json"},
    )
    assert packed.status_code == 200, packed.text
    dense = packed.json()["items"][0]["dense"]
    assert dense["dtype"] == "int8" and max(abs(v) for v in dense["values"]) == 127
    sparse = await front.post(
        "/v1/encode/org/embedder", json={"items": [{"text": "x"}], "params": {"output_types": ["sparse"]}}
    )
    assert sparse.status_code == 400  # the model declares no sparse output, nor could the upstream


async def test_the_openai_client_reads_a_remote_answer_unchanged(
    front: httpx.AsyncClient, upstream: httpx.AsyncClient
):
    expected = await _upstream_vectors(upstream, TEXTS)
    client = openai.AsyncOpenAI(
        api_key="unused", base_url=f"{str(front.base_url).rstrip('/')}/v1", http_client=front, max_retries=0
    )
    raw = await client.embeddings.with_raw_response.create(model="org/embedder", input=TEXTS)
    assert raw.headers["x-sie-served-by"] == "remote"
    result = raw.parse()
    np.testing.assert_array_equal(np.array([d.embedding for d in result.data], dtype=np.float32), expected)
    assert result.usage.prompt_tokens > 0


async def test_score_and_rerank_go_to_the_upstream_rerank(
    front: httpx.AsyncClient, upstream: httpx.AsyncClient
):
    own = await upstream.post("/v1/rerank", json={"model": RERANKER, "query": QUERY, "documents": DOCUMENTS})
    assert own.status_code == 200, own.text
    expected = {r["index"]: r["relevance_score"] for r in own.json()["results"]}
    reranked = await front.post(
        "/v1/rerank", json={"model": "org/reranker", "query": QUERY, "documents": DOCUMENTS, "top_n": 1}
    )
    assert reranked.status_code == 200, reranked.text
    assert reranked.headers["x-sie-served-by"] == "remote"
    best = max(expected, key=lambda i: expected[i])
    [result] = reranked.json()["results"]
    assert result["index"] == best and result["relevance_score"] == pytest.approx(expected[best])
    scored = await front.post(
        "/v1/score/org/reranker",
        json={
            "query": {"id": "q", "text": QUERY},
            "items": [{"id": f"d{i}", "text": d} for i, d in enumerate(DOCUMENTS)],
        },
        headers={"accept": "application/json"},
    )
    assert scored.status_code == 200, scored.text
    assert scored.headers["x-sie-upstream"] == "loop"
    body = scored.json()
    assert body["query_id"] == "q" and [s["rank"] for s in body["scores"]] == [0, 1]
    assert {s["item_id"]: s["score"] for s in body["scores"]} == pytest.approx(
        {f"d{i}": score for i, score in expected.items()}
    )


async def test_an_upstream_that_is_down_answers_503_queue_full(front: httpx.AsyncClient):
    down = await _encode(front, "org/dead")
    assert down.status_code == 503, down.text
    assert down.json()["detail"] == {
        "code": "QUEUE_FULL",
        "message": "The upstream serving model 'org/dead' is unavailable, please retry",
    }
    assert down.headers["x-sie-served-by"] == "remote" and down.headers["x-sie-upstream"] == "down"
    assert down.headers["retry-after"] == "5"


async def test_a_failed_bridge_answers_the_local_refusal_with_the_fallback_headers(front: httpx.AsyncClient):
    answer = await _encode(front, "org/stranded")
    assert answer.status_code == 503, answer.text
    assert answer.json()["detail"]["code"] == "MODEL_LOADING"
    assert answer.headers["x-sie-served-by"] == "local"
    assert answer.headers["x-sie-fallback-reason"] == "model_loading"
    assert answer.headers["x-sie-fallback-error"] == "QUEUE_FULL"
    assert answer.headers["retry-after"] == "5"


async def test_a_profile_on_an_undefined_upstream_answers_502_model_load_failed(front: httpx.AsyncClient):
    answer = await _encode(front, "org/nowhere")
    assert answer.status_code == 502, answer.text
    detail = answer.json()["detail"]
    assert detail["code"] == "MODEL_LOAD_FAILED"
    assert "upstream is not defined in this server's upstreams file" in detail["message"]


async def test_the_upstreams_input_too_long_is_answered_400_input_too_long(front: httpx.AsyncClient):
    """The upstream refuses a body past its limit 413 ``INPUT_TOO_LONG``; this server admits the text
    (its own limits are larger) and answers as the public server maps that refusal: 400
    ``INPUT_TOO_LONG``, which the SDKs raise as ``InputTooLongError``, in each route's envelope."""
    text = "word " * (UPSTREAM_BODY_LIMIT // 4)
    native = await front.post(
        "/v1/encode/org/embedder", json={"items": [{"text": text}]}, headers={"accept": "application/json"}
    )
    assert native.status_code == 400, native.text
    assert native.json()["detail"] == {
        "code": "INPUT_TOO_LONG",
        "message": "The upstream serving model 'org/embedder' refused the input as too long",
    }
    assert (native.headers["x-sie-served-by"], native.headers["x-sie-upstream"]) == ("remote", "loop")
    openai_route = await front.post("/v1/embeddings", json={"model": "org/embedder", "input": [text]})
    assert openai_route.status_code == 400, openai_route.text
    error = openai_route.json()["error"]
    assert (error["code"], error["type"]) == ("INPUT_TOO_LONG", "invalid_request_error")


async def _listed(front: httpx.AsyncClient, model: str) -> dict:
    one = await front.get(f"/v1/models/{model}")
    assert one.status_code == 200, one.text
    [in_list] = [m for m in (await front.get("/v1/models")).json()["models"] if m["name"] == model]
    assert in_list == one.json()
    return in_list


async def test_models_show_remote_profiles_served_with_their_routing(front: httpx.AsyncClient):
    """As the public server lists them: a remote-only model is ``available`` until a request reaches
    it, then ``loaded`` (nothing loads: its upstream was found); ``routing`` names the policy of the
    bare id and the kind of the upstream its remote profile calls; a local model has neither."""
    listed = await _listed(front, "org/listed")
    assert (listed["state"], listed["loaded"], listed["last_error"]) == ("available", False, None)
    assert listed["routing"] == {"policy": "remote_only", "upstream_kind": "openai"}
    assert listed["profiles"]["default"]["runtime_instance_id"] is None  # it runs in no process here
    assert listed["outputs"] == ["dense"] and listed["dims"] == {"dense": 384}
    assert (await _encode(front, "org/listed")).status_code == 200
    listed = await _listed(front, "org/listed")
    assert (listed["state"], listed["loaded"], listed["last_error"]) == ("loaded", True, None)
    hybrid = await _listed(front, "org/stranded")  # its local slot's state (a bridge starts its load)
    assert hybrid["routing"] == {"policy": "fallback", "upstream_kind": "openai"}
    assert hybrid["state"] in ("available", "loading", "loaded") and hybrid["last_error"] is None
    assert hybrid["profiles"]["default"]["runtime_instance_id"] is not None
    assert hybrid["profiles"]["hosted"]["runtime_instance_id"] is None
    variant = await _listed(front, "org/stranded:hosted")  # a variant has no routing of its own
    assert variant["routing"] == {"policy": "remote_only", "upstream_kind": "openai"}
    local = await _listed(front, "org/local")
    assert local["routing"] == {"policy": None, "upstream_kind": None}
    assert (local["state"], local["last_error"]) == ("available", None)


async def test_models_show_a_remote_profile_on_an_undefined_upstream_failed_once_tried(
    front: httpx.AsyncClient,
):
    before = await _listed(front, "org/nowhere")
    assert before["routing"] == {"policy": "remote_only", "upstream_kind": None}
    assert before["state"] in ("available", "failed")  # another test may have tried it first
    assert (await _encode(front, "org/nowhere")).status_code == 502
    after = await _listed(front, "org/nowhere")
    assert (after["state"], after["loaded"]) == ("failed", False)
    assert after["last_error"] == {
        "code": "MODEL_LOAD_FAILED",
        "message": "its remote profile's upstream is not defined in this server's upstreams file",
        "attempts": 1,
        "permanent": True,
    }


async def test_with_remote_serving_off_a_remote_profile_fails_when_tried(
    folders: tuple[Path, Path], upstreams_file: Path
):
    """The upstreams still load (``upstream_kind`` says theirs), and every remote profile is refused:
    502 ``MODEL_LOAD_FAILED``, then listed as failed; a fallback model's bare id stays local."""
    async with _front(folders[1], upstreams_file, remote_serving="off") as off:
        listed = await _listed(off, "org/embedder")
        assert (listed["state"], listed["routing"]) == (
            "available",
            {"policy": "remote_only", "upstream_kind": "openai"},
        )
        refused = await _encode(off, "org/embedder")
        assert refused.status_code == 502, refused.text
        assert refused.json()["detail"]["code"] == "MODEL_LOAD_FAILED"
        listed = await _listed(off, "org/embedder")
        assert listed["state"] == "failed" and listed["last_error"]["code"] == "MODEL_LOAD_FAILED"
        assert listed["last_error"]["message"] == "remote serving is switched off (SIE_REMOTE_SERVING)"
        hybrid = await _listed(off, "org/hybrid")
        assert hybrid["routing"] == {"policy": "fallback", "upstream_kind": "openai"}
