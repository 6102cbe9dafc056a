"""The request options each operation understands, and the one check that a request names no other.

A misspelt option (``normalise``, ``score-mode``) used to be ignored without a word, so the request ran
with the default and the caller never knew. Now every operation knows its list: the engine's own
options for that operation, the ones the model's family reads (declared beside its name in
``sie.catalog.families``, equal to its class's ``request_options``), and any option the model's profile
sets (a request may override those). Anything else is a 400 naming it and the allowed ones. No model
is loaded or imported for it, so it answers before a load, in the gateway too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from sie.catalog.catalog import CatalogEntry
from sie.catalog.errors import InvalidInput
from sie.catalog.families import declared_request_options

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


# The request options of a custom adapter (a ``file.py:Class`` next to its YAML): only its class knows,
# and only a process that runs models imports it (the engine passes ``adapters.loading``'s reader; a
# gateway passes none and leaves those requests' options to the worker that runs them).
CustomOptions = Callable[[CatalogEntry], frozenset[str]]


def check_known(
    entry: CatalogEntry,
    understood: frozenset[str],
    options: Mapping[str, Any] | None,
    custom: CustomOptions | None = None,
) -> None:
    if not options:
        return
    family_options = declared_request_options(entry.profile.adapter_path)
    if family_options is None:
        if custom is None:
            return
        family_options = custom(entry)
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
