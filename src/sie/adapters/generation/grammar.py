"""Structured output enforced while decoding, with llguidance.

llguidance (the constrained-decoding library vLLM and SGLang also ship) over xgrammar: it is one
self-contained Rust wheel with no dependencies, where xgrammar pulls Triton on Linux (hundreds of MB
for a CPU server); it compiles JSON Schema, regular expressions and Lark / GBNF grammars to one token
matcher, and computes a step's allowed-token mask without holding the GIL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import torch

GrammarKind = Literal["json_schema", "regex", "ebnf", "lark", "json_object"]


class GrammarError(ValueError):
    """A grammar llguidance refuses (the message names why)."""


@dataclass(frozen=True)
class GrammarSpec:
    kind: GrammarKind
    text: str  # the schema as JSON text, the regex or the grammar

    @classmethod
    def json_schema(cls, schema: dict[str, Any]) -> GrammarSpec:
        return cls("json_schema", json.dumps(schema))


# JSON as ``json.dumps`` writes it, with no whitespace of the model's choosing: free whitespace lets a
# model loop on blanks until its token cap (a schema's own ``x-guidance`` may still ask for it); and
# keywords the compiler does not implement are ignored rather than refused.
_JSON_OPTIONS: Final[Any] = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": True,
}


def _grammar(spec: GrammarSpec) -> str:
    import llguidance  # with the generator only (``Grammars``): seconds of a server's start

    try:
        if spec.kind == "json_object":
            return str(llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, _JSON_OPTIONS))
        if spec.kind == "json_schema":
            return str(llguidance.LLMatcher.grammar_from_json_schema(spec.text, _JSON_OPTIONS))
        if spec.kind == "regex":
            return str(llguidance.LLMatcher.grammar_from_regex(spec.text))
        if spec.kind == "lark":
            return str(llguidance.LLMatcher.grammar_from_lark(spec.text))
        return str(llguidance.grammar_from("ebnf", spec.text))
    except ValueError as exc:
        raise GrammarError(str(exc)) from None


class Grammars:
    """A model's tokenizer as llguidance sees it (built once per model: about a second), and the
    matchers of its requests."""

    def __init__(self, tokenizer: Any, eos: tuple[int, ...]) -> None:
        # Here, not at the top: llguidance's Hugging Face bridge imports transformers' GGUF and
        # generation modules (about 1.5 s), which a server without a generative model never needs.
        import llguidance.hf

        self._eos = eos
        self._unavailable: str | None = None
        try:
            self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, eos_token=list(eos) or None)
        except ValueError as exc:  # a tokenizer llguidance cannot read (WordPiece): no grammar, still a model
            self._unavailable = f"structured output is not available for this model's tokenizer ({exc})"

    def check(self, spec: GrammarSpec) -> str:
        """The compiled grammar, or ``GrammarError`` (before the request is queued)."""
        if self._unavailable is not None:
            raise GrammarError(self._unavailable)
        import llguidance

        grammar = _grammar(spec)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, self._tokenizer)
        if is_error:
            raise GrammarError(messages[0] if messages else "invalid grammar")
        return grammar

    def constraint(self, grammar: str) -> Constraint:
        import llguidance

        return Constraint(llguidance.LLMatcher(self._tokenizer, grammar, log_level=0), self._eos)


class Constraint:
    """One request's matcher: the tokens allowed next, as a boolean mask over the vocabulary."""

    def __init__(self, matcher: Any, eos: tuple[int, ...]) -> None:
        self._matcher = matcher
        self._eos = eos
        self._bits: torch.Tensor | None = None

    @property
    def accepting(self) -> bool:
        return bool(self._matcher.is_accepting())

    @property
    def error(self) -> str | None:
        return str(self._matcher.get_error()) if self._matcher.is_error() else None

    def allowed(self, vocab_size: int) -> torch.Tensor | None:
        if self._matcher.is_stopped() or self._matcher.is_error():
            mask = torch.zeros(vocab_size, dtype=torch.bool)
            mask[list(self._eos)] = True
            return mask
        words = (vocab_size + 31) // 32
        if self._bits is None or self._bits.shape[1] != words:
            self._bits = torch.empty((1, words), dtype=torch.int32)
        self._matcher.unsafe_compute_mask_ptr(self._bits.data_ptr(), self._bits.numel() * 4)
        bits = np.unpackbits(self._bits.numpy().view(np.uint8), bitorder="little")[:vocab_size]
        return torch.from_numpy(bits.astype(bool))

    def accept(self, token: int) -> None:
        if not self._matcher.is_stopped():
            self._matcher.consume_token(token)
