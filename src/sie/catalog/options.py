"""The request options each operation understands, and the one check that a request names no other.

A misspelt option (``normalise``, ``score-mode``) used to be ignored without a word, so the request ran
with the default and the caller never knew. Now every operation knows its list: the engine's own
options for that operation, the ones the model's family reads (declared beside its name in
``sie.catalog.families``, equal to its class's ``request_options``), and any option the model's profile
sets (a request may override those). Anything else is a 400 naming it and the allowed ones. No model
is loaded or imported for it, so it answers before a load, in the gateway too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from sie.catalog.catalog import CatalogEntry
from sie.catalog.errors import InvalidInput
from sie.catalog.families import declared_request_options
from sie.core.options import OverflowPolicy
from sie.weights.lora_sources import is_name, is_path

_EVERY: Final = frozenset({"profile", "lora_id", "instruction", "overflow_policy"})
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


_POLICIES: Final = frozenset(policy.value for policy in OverflowPolicy)


def overflow_policy(options: Mapping[str, Any]) -> OverflowPolicy:
    """``overflow_policy`` of the options (the profile's overlaid by the request's), checked once for
    every model and operation, in the public server's words; absent is ``default``."""
    raw = options.get("overflow_policy")
    if raw is None:
        return OverflowPolicy.DEFAULT
    if isinstance(raw, str) and raw in _POLICIES:
        return OverflowPolicy(raw)
    raise InvalidInput(f"Invalid overflow_policy: {raw!r}. Must be one of {sorted(_POLICIES)}.")


SHOWN_ID_CHARS: Final = 100  # of a refused lora_id, echoed back


class LoraNotAllowed(InvalidInput):
    """A ``lora_id`` that is neither declared by the model's profiles nor a name in the LoRA root.

    The message names the id and what is allowed, never a folder of the server: a declared LoRA that
    is a folder is shown by its profile. ``root_names`` are the root's names where the caller knows
    them (the engine), None where it cannot (a gateway has no LoRA root)."""

    def __init__(
        self, model: str, lora_id: str, declared: Mapping[str, str], root_names: Sequence[str] | None
    ) -> None:
        shown = lora_id if len(lora_id) <= SHOWN_ID_CHARS else lora_id[:SHOWN_ID_CHARS] + "..."
        ids = [lora for lora in declared if not is_path(lora)]
        ids += [f"the LoRA of profile '{profile}'" for lora, profile in declared.items() if is_path(lora)]
        if root_names is None:
            names = "a LoRA folder's name in the server's LoRA root (letters, digits, '.', '_', '-')"
        elif root_names:
            names = f"a name in the server's LoRA root: {', '.join(root_names)}"
        else:
            names = "a name in the server's LoRA root (none here: SIE_LORA_ROOT is unset or empty)"
        super().__init__(
            f"LoRA '{shown}' is not available for model '{model}'. Allowed: "
            f"{', '.join(ids) if ids else 'none declared by its profiles'}; or {names}. "
            "A lora_id is never a path."
        )


def check_lora(entry: CatalogEntry, options: Mapping[str, Any] | None) -> None:
    """The request's ``lora_id`` is one its model declares or could be a LoRA root's name; anything
    else (a path, ``~``, a Hub id no profile declares) is refused here, before any model or file is
    touched, in the gateway too. Whether the name is in the root is the engine's check."""
    lora = (options or {}).get("lora_id")
    if not isinstance(lora, str) or not lora:  # lora_option says what is wrong with it
        return
    declared = entry.config.loras
    if lora not in declared and not is_name(lora):
        raise LoraNotAllowed(entry.name, lora, declared, None)


def lora_option(options: Mapping[str, Any]) -> str | None:
    """``lora_id``: the LoRA adapter to run with, or None for the base model."""
    lora = options.get("lora_id")
    if lora is not None and (not isinstance(lora, str) or not lora):
        raise InvalidInput("Option 'lora_id' must be a non-empty string")
    return lora
