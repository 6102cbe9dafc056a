"""The request options each operation understands, and the one check that a request names no other.

A misspelt option (``normalise``, ``score-mode``) used to be ignored without a word, so the request ran
with the default and the caller never knew. Now every operation knows its list: the engine's own
options for that operation, the ones the model's family reads (``Adapter.request_options``), and any
option the model's profile sets (a request may override those). Anything else is a 400 naming it and
the allowed ones. The check reads the adapter class, not a loaded model, so it answers before a load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sie.adapters.registry import adapter_class, declared_request_options
from sie.engine.catalog import CatalogEntry
from sie.engine.errors import InvalidInput

_EVERY: Final = frozenset({"profile", "lora_id", "instruction"})
ENCODE: Final = _EVERY | {
    "output_types",
    "output_dtype",
    "pooling",
    "normalize",
    "is_query",
    "default_instruction",
    "query_template",
    "doc_template",
    "muvera",
}
# A similarity score encodes its query and documents, so it takes what encode takes.
SCORE: Final = ENCODE | {"score_mode", "score_weights"}
EXTRACT: Final = _EVERY


def check_known(entry: CatalogEntry, understood: frozenset[str], options: Mapping[str, Any] | None) -> None:
    if not options:
        return
    path = entry.profile.adapter_path
    family_options = declared_request_options(path)
    if family_options is None:  # a custom adapter: only its class knows
        family_options = adapter_class(path, entry.config_dir).request_options
    allowed = understood | family_options | entry.profile.runtime.keys()
    unknown = sorted(str(key) for key in options if key not in allowed)
    if unknown:
        named = ", ".join(f"'{key}'" for key in unknown)
        raise InvalidInput(
            f"Unknown option{'s' if len(unknown) > 1 else ''} {named} for model '{entry.name}'. "
            f"Allowed: {', '.join(sorted(allowed))}"
        )


def overlay(runtime: Mapping[str, Any], options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The one precedence of options (the public server's): the request's over the profile's."""
    return {**runtime, **(options or {})}


def lora_option(options: Mapping[str, Any]) -> str | None:
    """``lora_id``: the LoRA adapter to run with, or None for the base model."""
    lora = options.get("lora_id")
    if lora is not None and (not isinstance(lora, str) or not lora):
        raise InvalidInput("Option 'lora_id' must be a non-empty string")
    return lora
