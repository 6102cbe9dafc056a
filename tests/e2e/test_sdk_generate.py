"""Our SDK's generation methods (``sie.sdk``, sync and async) against the generation server, held to
transformers' greedy ``generate`` like the public SDK's in test_generate.py."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from sie.sdk import SIEAsyncClient, SIEClient
from sie.sdk._errors import RequestError, ServerError
from tests.e2e.conftest import GENERATIVE_QWEN as QWEN
from tests.e2e.test_generate import MESSAGES, PROMPT, SCHEMA, chat_prompt, reference


def test_generate_and_its_stream_equal_transformers(generation_server, generative_weights) -> None:
    want = reference(generative_weights[QWEN], PROMPT, 12)
    with SIEClient(generation_server.url) as client:
        result = client.generate(QWEN, PROMPT, max_new_tokens=12)
        assert result["text"] == want and result["model"] == QWEN
        assert result["usage"]["completion_tokens"] <= 12 and result["ttft_ms"] > 0
        chunks = list(client.stream_generate(QWEN, PROMPT, max_new_tokens=12))
        assert "".join(c["text_delta"] for c in chunks) == want
        assert chunks[-1]["done"] and chunks[-1]["usage"] == result["usage"]
        constrained = client.generate(
            QWEN, PROMPT, max_new_tokens=40, grammar={"json_schema": SCHEMA, "strict": True}
        )
        jsonschema.validate(json.loads(constrained["text"]), SCHEMA)


def test_chat_and_responses(generation_server, generative_weights) -> None:
    want = reference(generative_weights[QWEN], chat_prompt(generative_weights[QWEN]), 10)
    with SIEClient(generation_server.url) as client:
        chat = client.chat_completions(QWEN, MESSAGES, max_tokens=10)
        assert chat["choices"][0]["message"]["content"] == want
        chunks = list(client.stream_chat_completions(QWEN, MESSAGES, max_tokens=10))
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == want
        answer = client.responses(QWEN, "The quick brown fox", max_output_tokens=6)
        assert answer["object"] == "response" and answer["usage"]["output_tokens"] <= 6


def test_the_async_client_does_the_same(generation_server, generative_weights) -> None:
    want = reference(generative_weights[QWEN], PROMPT, 12)
    chat_want = reference(generative_weights[QWEN], chat_prompt(generative_weights[QWEN]), 10)

    async def run() -> tuple[str, str, str, str]:
        async with SIEAsyncClient(generation_server.url) as client:
            whole = await client.generate(QWEN, PROMPT, max_new_tokens=12)
            streamed = "".join(
                [c["text_delta"] async for c in client.stream_generate(QWEN, PROMPT, max_new_tokens=12)]
            )
            chat = await client.chat_completions(QWEN, MESSAGES, max_tokens=10)
            chat_streamed = "".join(
                [
                    c["choices"][0]["delta"].get("content") or ""
                    async for c in client.stream_chat_completions(QWEN, MESSAGES, max_tokens=10)
                    if c["choices"]
                ]
            )
            answer = await client.responses(QWEN, "The quick brown fox", max_output_tokens=6)
            assert answer["object"] == "response"
            return whole["text"], streamed, chat["choices"][0]["message"]["content"], chat_streamed

    whole, streamed, chat, chat_streamed = asyncio.run(run())
    assert whole == streamed == want
    assert chat == chat_streamed == chat_want


def test_refusals_raise_the_sdks_errors(generation_server) -> None:
    with SIEClient(generation_server.url) as client:
        with pytest.raises(RequestError) as refused:
            client.generate(QWEN, PROMPT, max_new_tokens=2, grammar={"regex": "[unclosed"})
        assert refused.value.status_code == 400
        with pytest.raises(RequestError) as refused:  # refused before the stream began: the 400 itself
            list(client.stream_generate(QWEN, PROMPT, max_new_tokens=2, grammar={"regex": "[unclosed"}))
        assert refused.value.status_code == 400
        with pytest.raises(RequestError) as refused:
            client.chat_completions(QWEN, MESSAGES, max_tokens=2, reasoning_effort="high")
        assert refused.value.status_code == 400 and refused.value.code == "unsupported_field"
        with pytest.raises(ServerError) as failed:  # a strict grammar the output cannot meet in 3 tokens
            client.generate(QWEN, PROMPT, max_new_tokens=3, grammar={"json_schema": SCHEMA, "strict": True})
        assert failed.value.code == "MODEL_OUTPUT_PARSE_ERROR"
        # The same failure in a stream comes after its first chunks: an ``error`` chunk, raised.
        chunks: list[dict] = []
        with pytest.raises(ServerError) as failed:
            for chunk in client.stream_generate(
                QWEN, PROMPT, max_new_tokens=3, grammar={"json_schema": SCHEMA, "strict": True}
            ):
                chunks.append(dict(chunk))
        assert failed.value.code == "MODEL_OUTPUT_PARSE_ERROR" and failed.value.status_code is None
        assert chunks and not any(chunk["done"] for chunk in chunks)


def test_the_async_client_raises_them_too(generation_server) -> None:
    async def run() -> None:
        async with SIEAsyncClient(generation_server.url) as client:
            with pytest.raises(RequestError):
                await client.generate(QWEN, PROMPT, max_new_tokens=2, grammar={"regex": "[unclosed"})
            with pytest.raises(ServerError) as failed:
                async for _ in client.stream_generate(
                    QWEN, PROMPT, max_new_tokens=3, grammar={"json_schema": SCHEMA, "strict": True}
                ):
                    pass
            assert failed.value.code == "MODEL_OUTPUT_PARSE_ERROR"

    asyncio.run(run())
