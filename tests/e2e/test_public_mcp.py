"""The public ``sie-mcp`` 0.10.1 document tools that generate, run against our server unchanged.

Its MCP server (``sie_mcp.server.build_server``, the edge's own tools, lifespan and ``SIEAsyncClient``)
runs in the public venv and is driven in process over the MCP SDK's in-memory transport; only its
environment points it at us (``SIE_BASE_URL``, the models it asks for). The generator is a random
Qwen3 under the catalogue's ``Qwen/Qwen3-0.6B``, held to transformers' greedy ``generate`` where a tool's
prompt is known (``summarize_document``); the structured tools must return what their schema or
pattern admits, which the edge checks again itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import script_runner
from tests.e2e.conftest import GENERATIVE_QWEN, RERANKER, Server
from tests.e2e.test_generate import reference

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SCHEMA = {
    "type": "object",
    # Bounded, so a random model's answer ends well within the tokens it is given.
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "year": {"type": "integer", "minimum": 0, "maximum": 2100},
    },
    "required": ["city", "year"],
    "additionalProperties": False,
}
PATTERN = "[a-z]{3,8}-[0-9]{2}"
DOCUMENTS = [
    "Paris is the capital of France. It hosted the summer games in 1900, 1924 and 2024.",
    "The Loire is the longest river in France, flowing more than a thousand kilometres.",
]
SUMMARY_TOKENS = 12

# Run by the public venv's python: every tool through an MCP client session, each outcome as JSON.
SCRIPT = r"""
import asyncio, json, sys
from mcp.shared.memory import create_connected_server_and_client_session
from sie_mcp.config import MCPConfig
from sie_mcp.offload import _SINGLE_PROMPT
from sie_mcp.server import build_server

calls = json.loads(sys.argv[1])


async def main():
    out = {"summary_prompt": _SINGLE_PROMPT}
    async with create_connected_server_and_client_session(build_server(MCPConfig.from_env())) as session:
        tools = await session.list_tools()
        out["tools"] = sorted(tool.name for tool in tools.tools)
        for name, (tool, arguments) in calls.items():
            result = await session.call_tool(tool, arguments)
            text = "".join(block.text for block in result.content if block.type == "text")
            out[name] = {"error": result.isError, "result": result.structuredContent, "text": text}
    print(json.dumps(out))


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def mcp_tools(
    public_python: Path, generation_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The tools' outcomes, one MCP session for all of them."""
    env = {
        "SIE_BASE_URL": generation_server.url,
        "SIE_MCP_GENERATE_MODEL": GENERATIVE_QWEN,
        "SIE_MCP_ENCODE_MODEL": MINILM,
        "SIE_MCP_RERANK_MODEL": RERANKER,
        "SIE_MCP_QA_MAX_TOKENS": "8",
    }
    run = script_runner(public_python, tmp_path_factory.mktemp("mcp"), "sie-mcp", env, 300)
    content = " ".join(DOCUMENTS)
    calls = {
        "summary": ("summarize_document", {"content": content, "max_output_tokens": SUMMARY_TOKENS}),
        "schema": (
            "generate_structured",
            {
                "prompt": "Name a city and a year as JSON.",
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "place", "schema": SCHEMA, "strict": True},
                },
                "max_output_tokens": 64,
            },
        ),
        "regex": (
            "generate_structured",
            {
                "prompt": "A short code:",
                "response_format": {"type": "regex", "regex": PATTERN},
                "max_output_tokens": 16,
            },
        ),
        "extracted": (
            "extract_structured",
            {"content": DOCUMENTS[0], "output_schema": SCHEMA, "max_output_tokens": 64},
        ),
        "answers": (
            "answer_questions",
            {"documents": DOCUMENTS, "questions": ["What is the capital of France?", "Which river?"]},
        ),
        # A catalogue generator this server's models dir does not hold.
        "refused": (
            "generate_structured",
            {"prompt": "hi", "response_format": {"type": "json_object"}, "model": "Qwen/Qwen3.6-27B"},
        ),
    }
    result: dict[str, Any] = run(SCRIPT, json.dumps(calls))
    return result


def _ok(outcome: dict[str, Any]) -> dict[str, Any]:
    assert outcome["error"] is False, outcome["text"]
    result: dict[str, Any] = outcome["result"]
    return result


def test_the_generation_tools_are_the_edges_own(mcp_tools: dict[str, Any]) -> None:
    wanted = {"answer_questions", "summarize_document", "extract_structured", "generate_structured"}
    assert wanted <= set(mcp_tools["tools"])


def test_a_summary_is_transformers_greedy_generate(
    mcp_tools: dict[str, Any], generative_weights: dict[str, Path]
) -> None:
    prompt = mcp_tools["summary_prompt"].format(text=" ".join(DOCUMENTS))
    want = reference(generative_weights[GENERATIVE_QWEN], prompt, SUMMARY_TOKENS).strip()
    summary = _ok(mcp_tools["summary"])
    assert summary["summary"] == want
    assert summary["metadata"]["chunks"] == 1


def test_structured_output_holds_to_its_schema_and_pattern(mcp_tools: dict[str, Any]) -> None:
    jsonschema.validate(json.loads(_ok(mcp_tools["schema"])["content"]), SCHEMA)
    assert re.fullmatch(PATTERN, _ok(mcp_tools["regex"])["content"])
    jsonschema.validate(_ok(mcp_tools["extracted"])["data"], SCHEMA)


def test_answers_are_grounded_in_passages_of_the_documents(mcp_tools: dict[str, Any]) -> None:
    answers = _ok(mcp_tools["answers"])["answers"]
    assert [a["question"] for a in answers] == ["What is the capital of France?", "Which river?"]
    for answer in answers:
        assert isinstance(answer["answer"], str)
        assert answer["passages"], answer
        for passage in answer["passages"]:
            document = DOCUMENTS[passage["doc_index"]]
            assert document[passage["start"] :].startswith(passage["text"][:40])


def test_a_model_the_server_lacks_is_the_tools_error(mcp_tools: dict[str, Any]) -> None:
    """Our 404 ``model_not_found`` reaches the agent as the tool's error, in the server's words."""
    refused = mcp_tools["refused"]
    assert refused["error"] is True
    assert "Model 'Qwen/Qwen3.6-27B' not found" in refused["text"], refused["text"]
