"""Tool calls out of generated text, in OpenAI's shape.

The chat templates of Qwen (2.5, 3, 3.5), Hermes and the models trained on their format ask for each
call as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; that is the format read here. The
text outside the tags stays the message's content. A tag whose body is not a JSON object with a
``name`` is left in the content as text, as vLLM's Hermes parser does.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Final

OPEN: Final = "<tool_call>"
_CALL: Final = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def openai(self, index: int | None = None) -> dict[str, Any]:
        call: dict[str, Any] = {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if index is not None:
            call["index"] = index
        return call


def parse(text: str) -> tuple[str, list[ToolCall]]:
    """The content left once the calls are taken out, and the calls in order."""
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        try:
            body = json.loads(match.group(1))
        except ValueError:
            return match.group(0)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return match.group(0)
        arguments = body.get("arguments", body.get("parameters", {}))
        text_arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(ToolCall(body["name"], text_arguments))
        return ""

    content = _CALL.sub(take, text)
    return (content.strip() if calls else content), calls


def forced(tools: list[dict[str, Any]], name: str | None) -> str:
    """A Lark grammar for exactly one call, of the tool ``name`` or of any tool (``tool_choice``
    ``required`` or a named function): the call's arguments held to the tool's parameter schema."""
    functions = [tool.get("function", tool) for tool in tools]
    chosen = [f for f in functions if name is None or f.get("name") == name]
    if not chosen:
        raise ValueError(f"tool_choice names '{name}', which is not among the tools")
    schemas = [
        {
            "type": "object",
            "properties": {
                "name": {"const": f.get("name")},
                "arguments": f.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in chosen
    ]
    schema: dict[str, Any] = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    # JSON as json.dumps writes it (as ``grammar`` compiles JSON Schema): no whitespace loop.
    schema["x-guidance"] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    return f'start: "{OPEN}\\n" call "\\n</tool_call>"\ncall: %json {json.dumps(schema)}\n'
