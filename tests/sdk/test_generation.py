"""The generation methods on fakes, both clients: the bodies and paths sent, the typed results, the SSE
parsing, and the retry rules of a call that is not idempotent (no second send once it may have run)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from sie.sdk import (
    ModelLoadingError,
    RequestError,
    ServerError,
    SIEAsyncClient,
    SIEClient,
    SIEConnectionError,
)

from .fakes import FakeServer, as_json, call, error, raises

RESULT = {
    "model": "Qwen/Qwen3-0.6B",
    "text": " fast",
    "finish_reason": "length",
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    "ttft_ms": 4.5,
    "tpot_ms": 1.25,
}
CHUNKS = [
    {"request_id": "gen-1", "seq": 0, "text_delta": " fa", "done": False},
    {"request_id": "gen-1", "seq": 1, "text_delta": "st", "done": False},
    {
        "request_id": "gen-1",
        "seq": 2,
        "text_delta": "",
        "done": True,
        "finish_reason": "length",
        "usage": RESULT["usage"],
        "ttft_ms": 4.5,
    },
]


def sse(*events: Any, done: bool = True) -> Any:
    lines = [": keep-alive", ""]
    for event in events:
        lines += [f"data: {json.dumps(event)}", ""]
    if done:
        lines += ["data: [DONE]", ""]
    content = "\n".join(lines).encode()
    return lambda: httpx.Response(200, content=content, headers={"content-type": "text/event-stream"})


async def collect(client: SIEClient | SIEAsyncClient, method: str, *args: Any, **kwargs: Any) -> list[Any]:
    stream = getattr(client, method)(*args, **kwargs)
    if isinstance(client, SIEAsyncClient):
        return [chunk async for chunk in stream]
    return list(stream)


def sent(server: FakeServer, index: int = -1) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(server.requests[index].content)
    return body


async def test_generate_posts_the_safe_id_and_only_the_fields_set(make_client):
    server = FakeServer(as_json({**RESULT, "extra": 1}))
    result = await call(
        make_client(server),
        "generate",
        "Qwen/Qwen3-0.6B",
        "Vector search",
        max_new_tokens=2,
        temperature=0.0,
        stop=["\n"],
        grammar={"regex": "[a-z ]+"},
        seed=7,
    )
    assert result == RESULT
    request = server.requests[0]
    assert request.url.path == "/v1/generate/Qwen__Qwen3-0.6B"
    assert request.headers["content-type"] == "application/json"
    assert sent(server) == {
        "prompt": "Vector search",
        "max_new_tokens": 2,
        "temperature": 0.0,
        "stop": ["\n"],
        "grammar": {"regex": "[a-z ]+"},
        "seed": 7,
    }


async def test_a_generate_answer_without_its_text_is_a_request_error(make_client):
    with pytest.raises(RequestError, match="'model'/'text'"):
        await call(make_client(FakeServer(as_json({"model": "m"}))), "generate", "m", "p", max_new_tokens=1)


async def test_stream_generate_yields_the_chunks_skipping_keep_alives(make_client):
    server = FakeServer(sse(*CHUNKS))
    chunks = await collect(
        make_client(server), "stream_generate", "a/b", "p", max_new_tokens=2, logprobs=True
    )
    assert chunks == CHUNKS
    assert server.requests[0].headers["accept"] == "text/event-stream"
    assert sent(server) == {"prompt": "p", "max_new_tokens": 2, "logprobs": True, "stream": True}


async def test_an_error_chunk_raises_server_error_with_its_code(make_client):
    failed = {
        "request_id": "gen-1",
        "seq": 1,
        "text_delta": "",
        "done": True,
        "error": {"code": "INFERENCE_ERROR", "message": "boom"},
    }
    server = FakeServer(sse(CHUNKS[0], failed))
    with pytest.raises(ServerError, match="boom") as raised:
        await collect(make_client(server), "stream_generate", "m", "p", max_new_tokens=2)
    assert raised.value.code == "INFERENCE_ERROR" and raised.value.request == {"id": "gen-1"}
    assert len(server.requests) == 1


async def test_a_malformed_chunk_is_a_request_error(make_client):
    broken = lambda: httpx.Response(200, content=b"data: {nope\n\n")  # noqa: E731
    with pytest.raises(RequestError, match="Malformed SSE"):
        await collect(make_client(FakeServer(broken)), "stream_generate", "m", "p", max_new_tokens=2)


async def test_a_refused_stream_raises_the_typed_error(make_client):
    server = FakeServer(error(400, "INVALID_INPUT", "bad grammar"))
    with pytest.raises(RequestError, match="bad grammar") as raised:
        await collect(make_client(server), "stream_generate", "m", "p", max_new_tokens=2)
    assert raised.value.status_code == 400


async def test_a_cold_model_is_waited_for_then_generates(make_client, fake_time):
    server = FakeServer(error(503, "MODEL_LOADING", retry_after="2"), sse(*CHUNKS))
    chunks = await collect(make_client(server), "stream_generate", "m", "p", max_new_tokens=2)
    assert len(chunks) == 3 and fake_time.sleeps == [2.0] and len(server.requests) == 2
    server = FakeServer(error(503, "QUEUE_FULL", retry_after="1"), as_json(RESULT))
    assert (await call(make_client(server), "generate", "m", "p", max_new_tokens=2))["text"] == " fast"
    assert len(server.requests) == 2


async def test_a_cold_model_past_the_budget_raises_model_loading(make_client):
    server = FakeServer(error(503, "MODEL_LOADING", retry_after="5"))
    with pytest.raises(ModelLoadingError):
        await call(make_client(server), "generate", "m", "p", max_new_tokens=2, provision_timeout_s=12)


@pytest.mark.parametrize(
    "answer",
    [
        error(504, None, "gateway timeout"),
        error(503, None, "unknown"),
        raises(lambda: httpx.ReadError("reset mid-call")),
        raises(lambda: httpx.RemoteProtocolError("peer closed")),
    ],
)
async def test_nothing_that_may_have_run_is_sent_twice(make_client, answer):
    server = FakeServer(answer, as_json(RESULT))
    with pytest.raises((ServerError, SIEConnectionError)):
        await call(make_client(server), "generate", "m", "p", max_new_tokens=2)
    assert len(server.requests) == 1


async def test_a_connection_that_never_opened_is_retried(make_client):
    server = FakeServer(raises(lambda: httpx.ConnectError("refused")), as_json(RESULT))
    assert (await call(make_client(server), "generate", "m", "p", max_new_tokens=2))["model"] == RESULT[
        "model"
    ]
    assert len(server.requests) == 2


async def test_chat_completions_sends_the_model_as_given_and_extra_body_last(make_client):
    answer = {"object": "chat.completion", "choices": [{"message": {"content": "hi"}}]}
    server = FakeServer(as_json(answer))
    messages = [{"role": "user", "content": "hi"}]
    result = await call(
        make_client(server), "chat_completions", "a/b", messages, max_tokens=4, extra_body={"top_k": 5}
    )
    assert result == answer and server.requests[0].url.path == "/v1/chat/completions"
    assert sent(server) == {"model": "a/b", "messages": messages, "max_tokens": 4, "top_k": 5}


async def test_stream_chat_completions_yields_chunks_and_raises_openai_errors(make_client):
    chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    server = FakeServer(sse(chunk))
    messages = [{"role": "user", "content": "hi"}]
    assert await collect(make_client(server), "stream_chat_completions", "m", messages) == [chunk]
    assert sent(server)["stream"] is True
    refusal = {
        "error": {"message": "no", "type": "invalid_request_error", "param": "x", "code": "unsupported_field"}
    }
    with pytest.raises(RequestError, match="no") as raised:
        await call(make_client(FakeServer(as_json(refusal, 400))), "chat_completions", "m", messages)
    assert raised.value.code == "unsupported_field"


async def test_responses_sends_its_keywords(make_client):
    answer = {"object": "response", "output": []}
    server = FakeServer(as_json(answer))
    assert await call(make_client(server), "responses", "m", "hello", max_output_tokens=3, seed=1) == answer
    assert server.requests[0].url.path == "/v1/responses"
    assert sent(server) == {"model": "m", "input": "hello", "max_output_tokens": 3, "seed": 1}


GENERATION = ("generate", "stream_generate", "chat_completions", "stream_chat_completions", "responses")


def test_both_clients_take_the_same_keywords_and_the_public_sdk_has_each(run_public_sdk):
    import inspect

    ours = {}
    for name in GENERATION:
        sync_params = list(inspect.signature(getattr(SIEClient, name)).parameters)
        assert sync_params == list(inspect.signature(getattr(SIEAsyncClient, name)).parameters), name
        ours[name] = [p for p in sync_params if p not in ("self", "fields")]
    script = f"""
import inspect, json
from sie_sdk import SIEClient
print(json.dumps({{n: list(inspect.signature(getattr(SIEClient, n)).parameters) for n in {GENERATION!r}}}))
"""
    public = run_public_sdk(script)
    for name, params in ours.items():
        assert set(params) <= set(public[name]), (name, set(params) - set(public[name]))
        assert params[:2] == public[name][1:3], name  # model, then prompt / messages / input
