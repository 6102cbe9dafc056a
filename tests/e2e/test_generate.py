"""Generation through a real server: the native route and OpenAI's, with real clients.

One server runs two generative ids of the shipped catalogue on small random models built from their
architectures' configs (tests/builders.py): ``Qwen/Qwen3-0.6B`` (Qwen3) and ``defog/sqlcoder-7b-2``
(Llama). Every answer is held to transformers' own greedy ``generate`` on the same weights; the
``openai`` client streams a chat completion; the public ``sie-sdk`` 0.10.1 calls ``generate``,
``stream_generate``, ``chat_completions`` and ``stream_chat_completions``; a JSON Schema response
validates; bad requests get their 4xx and the server keeps serving.
"""

from __future__ import annotations

import base64
import io
import json
import re
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import msgpack
import pytest
import torch
from openai import OpenAI
from PIL import Image
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

from sie.adapters.qwen3_vl import load_processor
from tests.conftest import random_png
from tests.e2e.conftest import GENERATIVE_LLAMA as LLAMA
from tests.e2e.conftest import GENERATIVE_PADDED as PADDED
from tests.e2e.conftest import GENERATIVE_QWEN as QWEN
from tests.e2e.conftest import GENERATIVE_VL as VL
from tests.e2e.conftest import Server
from tests.e2e.test_vision import data_uri

PROMPT = "Vector search finds"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def server(generation_server: Server) -> Server:
    return generation_server


@pytest.fixture(scope="module")
def weights(generative_weights: dict[str, Path]) -> dict[str, Path]:
    return generative_weights


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The quick brown fox"}]
SCHEMA = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["color", "n"],
    "additionalProperties": False,
}


def reference(folder: Path, text: str, new_tokens: int) -> str:
    """transformers' greedy ``generate`` on the same weights, decoded as the server decodes."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
    return str(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def chat_prompt(folder: Path) -> str:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return str(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False))


def sse(response: httpx.Response) -> list[dict]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[len("data: ") :]))
    return events


@pytest.mark.parametrize("sie_id", [QWEN, LLAMA])
def test_native_generate_equals_transformers_whole_and_streamed(server, weights, sie_id) -> None:
    want = reference(weights[sie_id], PROMPT, 20)
    path = f"/v1/generate/{sie_id.replace('/', '__')}"
    body = {"prompt": PROMPT, "max_new_tokens": 20}
    whole = server.client.post(path, json=body, headers={"accept": "application/json"})
    assert whole.status_code == 200, whole.text
    result = whole.json()
    assert result["model"] == sie_id and result["text"] == want
    usage = result["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert result["finish_reason"] in ("stop", "length") and result["ttft_ms"] > 0
    packed = server.client.post(
        path,
        content=msgpack.packb(body),
        headers={"content-type": "application/msgpack", "accept": "application/msgpack"},
    )
    assert packed.headers["content-type"] == "application/msgpack"
    assert msgpack.unpackb(packed.content)["text"] == want
    with server.client.stream("POST", path, json=body | {"stream": True}) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        chunks = sse(streamed)
    assert [c["seq"] for c in chunks] == list(range(len(chunks)))
    assert "".join(c["text_delta"] for c in chunks) == want
    assert [c["done"] for c in chunks].count(True) == 1 and chunks[-1]["done"]
    assert chunks[-1]["usage"] == usage and chunks[-1]["finish_reason"] == result["finish_reason"]


def test_openai_client_streams_a_chat_completion_equal_to_the_whole_one(server, weights) -> None:
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    want = reference(weights[QWEN], chat_prompt(weights[QWEN]), 16)
    whole = client.chat.completions.create(model=QWEN, messages=MESSAGES, max_tokens=16)
    assert whole.choices[0].message.content == want
    assert whole.usage.completion_tokens == 16 or whole.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model=QWEN, messages=MESSAGES, max_tokens=16, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == want
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason


def test_a_model_continuous_batching_cannot_hold_streams_from_generate(server, weights) -> None:
    """Qwen3.5's hybrid (linear-attention layers) runs on transformers' ``generate`` in padded batches:
    the OpenAI client's chat, whole and streamed, and the native route, sent at once (so they share
    batches, their prompts padded to the longest), each equal ``generate``'s greedy output of its
    prompt alone (its profile samples by default: these ask for temperature 0)."""
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    want = reference(weights[PADDED], chat_prompt(weights[PADDED]), 12)
    asked = {"model": PADDED, "messages": MESSAGES, "max_tokens": 12, "temperature": 0}

    def whole() -> Any:
        return client.chat.completions.create(**asked)

    def streamed() -> list[Any]:
        return list(
            client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True})
        )

    def native() -> httpx.Response:
        return server.client.post(
            f"/v1/generate/{PADDED.replace('/', '__')}",
            json={"prompt": PROMPT, "max_new_tokens": 12, "temperature": 0},
            headers={"accept": "application/json"},
        )

    with ThreadPoolExecutor(6) as pool:
        wholes = [pool.submit(whole) for _ in range(2)]
        streams = [pool.submit(streamed) for _ in range(2)]
        natives = [pool.submit(native) for _ in range(2)]
        answers, chunk_lists, raw = ([f.result() for f in group] for group in (wholes, streams, natives))
    for answer, chunks in zip(answers, chunk_lists, strict=True):
        assert answer.choices[0].message.content == want
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
        assert chunks[-1].usage == answer.usage
    prompted = reference(weights[PADDED], PROMPT, 12)
    for response in raw:
        assert response.status_code == 200, response.text
        assert response.json()["text"] == prompted


def _vl_reference(folder: Path, question: str, image: str, new_tokens: int) -> str:
    """transformers' Qwen3-VL processor and ``generate`` on the same chat, decoded as the server does."""
    processor = load_processor(folder, folder)
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    text = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    picture = Image.open(io.BytesIO(base64.b64decode(image.split(",", 1)[1]))).convert("RGB")
    inputs = processor(text=[text], images=[picture], return_tensors="pt")
    model = AutoModelForImageTextToText.from_pretrained(folder, attn_implementation="sdpa").eval()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return str(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))


def test_the_openai_client_chats_about_an_image_with_a_vision_language_model(server, weights) -> None:
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    image = data_uri(random_png(64, 48, 1))
    question = "What is in the picture?"
    content = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": question}]
    asked = {
        "model": VL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
        "temperature": 0,
    }
    want = _vl_reference(weights[VL], question, image, 8)
    whole = client.chat.completions.create(**asked)
    assert whole.choices[0].message.content == want
    streamed = client.chat.completions.create(**asked, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want
    # The image counts in the prompt: its merged patches are tokens of it.
    text_only = client.chat.completions.create(
        **asked | {"messages": [{"role": "user", "content": question}]}
    )
    assert whole.usage.prompt_tokens > text_only.usage.prompt_tokens


PUBLIC_SDK_IMAGE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from sie_sdk import SIEClient
    url, model, prompt, image = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]).read_bytes()
    with SIEClient(url) as client:
        whole = client.generate(model, prompt, images=[image], max_new_tokens=8, temperature=0.0)
    print(json.dumps({"text": whole["text"], "usage": dict(whole["usage"])}))
    """
)


def test_the_public_sdk_generates_from_a_prompt_and_an_image(
    server, weights, run_public_sdk, tmp_path
) -> None:
    """The native route's ``images``: the prompt goes as one user turn beside them, through the chat
    template, as the public server renders it."""
    image = data_uri(random_png(40, 72, 2))
    path = tmp_path / "image.png"
    path.write_bytes(base64.b64decode(image.split(",", 1)[1]))
    got = run_public_sdk(PUBLIC_SDK_IMAGE, server.url, VL, PROMPT, str(path))
    assert got["text"] == _vl_reference(weights[VL], PROMPT, image, 8)
    plain = server.client.post(
        f"/v1/generate/{VL.replace('/', '__')}",
        json={"prompt": PROMPT, "max_new_tokens": 8, "temperature": 0},
        headers={"accept": "application/json"},
    )
    assert got["usage"]["prompt_tokens"] > plain.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize(
    ("model", "url", "message"),
    [
        (QWEN, "data:image/png;base64,", "generates from text only"),
        (VL, "https://169.254.169.254/latest/meta-data", "does not fetch URLs"),
        (VL, "data:image/png;base64,bm90IGFuIGltYWdl", "not an image"),
    ],
    ids=["text-only-model", "url", "not-an-image"],
)
def test_an_image_a_model_cannot_read_is_a_400(server, model, url, message) -> None:
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}]
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 2}
    refused = server.client.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400, refused.text
    assert message in refused.json()["error"]["message"]
    assert (
        server.client.post(
            "/v1/chat/completions", json=body | {"messages": [{"role": "user", "content": "hi"}]}
        ).status_code
        == 200
    )


def test_a_json_schema_response_validates_and_tools_come_back_as_tool_calls(server) -> None:
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    answer = client.chat.completions.create(
        model=QWEN,
        messages=MESSAGES,
        max_tokens=40,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "pick", "schema": SCHEMA, "strict": True},
        },
    )
    jsonschema.validate(json.loads(answer.choices[0].message.content), SCHEMA)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"enum": ["Paris", "Rome"]}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    forced = client.chat.completions.create(
        model=QWEN, messages=MESSAGES, max_tokens=60, tools=tools, tool_choice="required"
    )
    choice = forced.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Rome")
    streamed = client.chat.completions.create(
        model=QWEN, messages=MESSAGES, max_tokens=60, tools=tools, tool_choice="required", stream=True
    )
    deltas = [c.choices[0].delta for c in streamed if c.choices]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert calls and calls[0].function.name == "get_weather"


def test_the_public_gateways_regex_and_grammar_formats_constrain_a_chat(server) -> None:
    """``response_format`` types ``regex`` and ``grammar`` (EBNF), as the public sie-mcp sends them."""
    post = server.client.post
    body = {"model": QWEN, "messages": MESSAGES, "max_tokens": 16}
    regex = {"type": "regex", "regex": "[a-z]{3,6}-[0-9]{2}"}
    answer = post("/v1/chat/completions", json={**body, "response_format": regex})
    assert answer.status_code == 200, answer.text
    assert re.fullmatch(regex["regex"], answer.json()["choices"][0]["message"]["content"])
    grammar = {"type": "grammar", "grammar": 'root ::= ("yes" | "no") " " [0-9]', "syntax": "ebnf"}
    answer = post(
        "/v1/completions", json={"model": QWEN, "prompt": PROMPT, "max_tokens": 8, "response_format": grammar}
    )
    assert answer.status_code == 200, answer.text
    assert re.fullmatch("(yes|no) [0-9]", answer.json()["choices"][0]["text"])
    for refused in (
        {"type": "regex"},  # its pattern missing
        {"type": "regex", "regex": "[unclosed"},
        {"type": "grammar", "grammar": "root ::= undefined_rule", "syntax": "ebnf"},
        {"type": "grammar", "grammar": 'root ::= "a"', "syntax": "lark"},
    ):
        answer = post("/v1/chat/completions", json={**body, "response_format": refused})
        assert answer.status_code == 400, (refused, answer.text)
        assert answer.json()["error"]["code"] == "invalid_request", answer.text
    both = post("/v1/chat/completions", json={**body, "response_format": regex, "regex": "[a-z]+"})
    assert both.status_code == 400 and "one of" in both.json()["error"]["message"]


def test_completions_and_responses(server, weights) -> None:
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    want = reference(weights[QWEN], PROMPT, 8)
    completion = client.completions.create(model=QWEN, prompt=PROMPT, max_tokens=8)
    assert completion.choices[0].text == want and completion.object == "text_completion"
    streamed = client.completions.create(model=QWEN, prompt=PROMPT, max_tokens=8, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == want
    response = client.responses.create(model=QWEN, input="The quick brown fox", max_output_tokens=8)
    assert response.status in ("completed", "incomplete") and response.usage.output_tokens <= 8
    with client.responses.stream(model=QWEN, input="The quick brown fox", max_output_tokens=8) as events:
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        final = events.get_final_response()
    assert "".join(deltas) == final.output_text == response.output_text


def test_bad_requests_are_refused_with_their_codes_and_the_server_keeps_serving(server) -> None:
    post = server.client.post
    native = f"/v1/generate/{QWEN.replace('/', '__')}"
    cases = [
        (f"/v1/generate/{MINILM}", {"prompt": "x", "max_new_tokens": 1}, 400, "INVALID_INPUT"),
        (native, {"prompt": "", "max_new_tokens": 1}, 400, "INVALID_INPUT"),
        (native, {"prompt": "x", "max_new_tokens": 0}, 400, "INVALID_INPUT"),
        (native, {"prompt": "x", "max_new_tokens": 100000}, 400, "INVALID_INPUT"),
        (native, {"prompt": "x " * 3000, "max_new_tokens": 1000}, 400, "INPUT_TOO_LONG"),
        (
            native,
            {"prompt": "x", "max_new_tokens": 2, "grammar": {"regex": "[unclosed"}},
            400,
            "INVALID_INPUT",
        ),
        (native, {"prompt": "x", "max_new_tokens": 2, "top_p": 0}, 400, "INVALID_INPUT"),
        (native, {"prompt": "x", "max_new_tokens": 2, "options": {"nope": 1}}, 400, "INVALID_INPUT"),
        ("/v1/generate/nope__missing", {"prompt": "x", "max_new_tokens": 1}, 404, "MODEL_NOT_FOUND"),
        (f"/v1/encode/{QWEN}", {"items": [{"text": "x"}]}, 400, "INVALID_INPUT"),
    ]
    for path, body, status, code in cases:
        answer = post(path, json=body, headers={"accept": "application/json"})
        assert answer.status_code == status, (path, body, answer.text)
        assert answer.json()["detail"]["code"] == code, (path, body, answer.text)
    openai = post("/v1/chat/completions", json={"model": QWEN, "messages": [], "max_tokens": 1})
    assert openai.status_code == 400 and openai.json()["error"]["code"] == "invalid_request"
    missing = post("/v1/chat/completions", json={"model": "nope/missing", "messages": MESSAGES})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert post(native, json={"prompt": "x", "max_new_tokens": 2}).status_code == 200
    assert post(f"/v1/generate/{QWEN}", json={"prompt": "x", "max_new_tokens": 2}).status_code == 200
    # Logprobs without streaming come in the answer (the public server takes them streamed only).
    scored = post(native, json={"prompt": "x", "max_new_tokens": 2, "top_logprobs": 2}).json()
    assert len(scored["logprobs"]) == 2 and len(scored["logprobs"][0]["top_logprobs"]) == 2


PUBLIC_SDK = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import SIEClient
    url, model, prompt, messages = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    client = SIEClient(url)
    whole = client.generate(model, prompt, max_new_tokens=12)
    chunks = list(client.stream_generate(model, prompt, max_new_tokens=12))
    chat = client.chat_completions(model, messages, max_tokens=12)
    chat_chunks = list(client.stream_chat_completions(model, messages, max_tokens=12))
    def plain(value):
        return json.loads(json.dumps(value, default=lambda o: getattr(o, "__dict__", str(o))))
    print(json.dumps({
        "whole": plain(dict(whole)),
        "chunks": [plain(dict(c)) for c in chunks],
        "chat": plain(chat),
        "chat_chunks": [plain(c) for c in chat_chunks],
    }))
    """
)


def test_the_public_sdk_generates_streams_and_chats(server, weights, run_public_sdk) -> None:
    got = run_public_sdk(PUBLIC_SDK, server.url, QWEN, PROMPT, json.dumps(MESSAGES))
    want = reference(weights[QWEN], PROMPT, 12)
    assert got["whole"]["text"] == want
    assert got["whole"]["usage"]["completion_tokens"] <= 12
    assert "".join(c["text_delta"] for c in got["chunks"]) == want
    assert got["chunks"][-1]["done"] is True
    chat_want = reference(weights[QWEN], chat_prompt(weights[QWEN]), 12)
    assert got["chat"]["choices"][0]["message"]["content"] == chat_want
    streamed = "".join(
        (c["choices"][0]["delta"].get("content") or "") for c in got["chat_chunks"] if c.get("choices")
    )
    assert streamed == chat_want


def queue_depth(server: Server, model: str) -> float:
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith("sie_queue_depth{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_client_that_goes_away_cancels_its_generation(server) -> None:
    path = f"/v1/generate/{QWEN.replace('/', '__')}"
    body = {"prompt": PROMPT, "max_new_tokens": 900, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("POST", path, json=body) as stream,
    ):
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        assert queue_depth(server, QWEN) == 1  # running, counted where KEDA and eviction look
    deadline = time.monotonic() + 10
    while queue_depth(server, QWEN) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queue_depth(server, QWEN) == 0
    answer = server.client.post(path, json={"prompt": PROMPT, "max_new_tokens": 2})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2


def test_a_generation_past_its_profiles_deadline_is_cancelled_and_answered_504(server, weights) -> None:
    """A profile's ``overall_timeout_s`` / ``first_chunk_timeout_s`` (``adapter_options.runtime``): a
    whole answer is the public server's 504 (code ``GENERATION_TIMEOUT``), a stream ends with that
    error as its last chunk, the generation leaves the batch, and the server serves on."""
    eos = AutoTokenizer.from_pretrained(weights[QWEN]).eos_token_id
    endless = {"max_new_tokens": 1024, "logit_bias": {str(eos): -100}}  # 1,024 forwards: past 0.3 s
    overall = f"{QWEN}:overall-300ms"
    chat = {"model": overall, "messages": MESSAGES, "max_tokens": 1024, "logit_bias": {str(eos): -100}}
    openai = server.client.post("/v1/chat/completions", json=chat, timeout=120)  # loads the variant first
    assert openai.status_code == 504, openai.text
    assert openai.json()["error"]["code"] == "timeout"
    assert "overall_timeout_s" in openai.json()["error"]["message"]
    native = f"/v1/generate/{overall.replace('/', '__')}"
    whole = server.client.post(
        native, json={"prompt": PROMPT} | endless, headers={"accept": "application/json"}
    )
    assert whole.status_code == 504 and whole.headers["x-sie-error-code"] == "GENERATION_TIMEOUT"
    assert whole.json()["detail"]["code"] == "GENERATION_TIMEOUT"
    with server.client.stream("POST", native, json={"prompt": PROMPT, "stream": True} | endless) as stream:
        assert stream.status_code == 200
        chunks = sse(stream)
    assert chunks[-1]["done"] and chunks[-1]["error"]["code"] == "GENERATION_TIMEOUT"
    assert all(not c["done"] for c in chunks[:-1]) and len(chunks) > 1  # tokens came before the deadline
    deadline = time.monotonic() + 10
    while queue_depth(server, overall) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queue_depth(server, overall) == 0
    first = f"{QWEN}:first-token-1ms"
    long_prompt = {"model": first, "prompt": "x " * 2000, "max_tokens": 4}  # its prefill alone takes longer
    late = server.client.post("/v1/completions", json=long_prompt, timeout=120)
    assert late.status_code == 504 and "first_chunk_timeout_s" in late.json()["error"]["message"]
    answer = server.client.post(
        f"/v1/generate/{QWEN.replace('/', '__')}", json={"prompt": PROMPT, "max_new_tokens": 2}
    )
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2


PUBLIC_SDK_TIMEOUT = textwrap.dedent(
    """
    import json, sys, time
    from sie_sdk import SIEClient
    from sie_sdk.client.errors import ServerError
    url, model, eos = sys.argv[1], sys.argv[2], sys.argv[3]
    client = SIEClient(url)
    started = time.monotonic()
    try:
        client.generate(model, "Vector search finds", max_new_tokens=1024, logit_bias={eos: -100})
    except ServerError as exc:
        print(json.dumps({"status": exc.status_code, "code": exc.code, "message": str(exc),
                          "seconds": time.monotonic() - started}))
    else:
        print(json.dumps({"status": 200}))
    """
)


def test_the_public_sdk_raises_its_server_error_on_a_generation_past_its_deadline_and_retries_not(
    server, weights, run_public_sdk
) -> None:
    """The public SDK's ``generate`` on a 504: a ``ServerError`` with the status and our code, not
    retried (generation is not idempotent): the call ends within seconds, not after retries."""
    eos = str(AutoTokenizer.from_pretrained(weights[QWEN]).eos_token_id)
    model = f"{QWEN}:overall-300ms"
    got = run_public_sdk(PUBLIC_SDK_TIMEOUT, server.url, model, eos)
    assert got["status"] == 504 and got["code"] == "GENERATION_TIMEOUT", got
    assert "Not retried" in got["message"] and got["seconds"] < 30, got  # the SDK's own words for a 504


def test_an_unknown_openai_field_is_refused_by_name(server) -> None:
    body = {"model": QWEN, "messages": MESSAGES, "max_tokens": 2, "reasoning_effort": "high"}
    answer = server.client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "unsupported_field" and "reasoning_effort" in error["message"]
