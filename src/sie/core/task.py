"""An extraction request's parameters as a family reads them, frozen so that items asking the same
thing batch together (``Forward`` compares them), and the one error a family's input checks raise.

Pure Python on purpose: the request checks (``sie.catalog.admit``) build a ``Task`` in the gateway,
which loads no model code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sie.core.extraction import ItemError


class UnsupportedInput(ValueError):
    """An item lacks what the adapter needs (e.g. a pair sent to a model that embeds single texts)."""


class ItemRefused(UnsupportedInput):
    """One item's own failure, raised by a family's per-item code (a Laya state that cannot be read)
    and caught in its ``prepare``, which answers that item ``Prepared.refused(exc.error)`` while the
    others run; ``code`` is a public error code (``INVALID_INPUT``, ``INPUT_TOO_LONG``). One that
    escapes ``prepare`` still fails the request as any ``UnsupportedInput`` does."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.error = ItemError(code, message)


@dataclass(frozen=True)
class Task:
    """An extraction request's parameters: its ``labels``, ``instruction``, runtime options (the
    profile's overlaid by the request's, as sorted pairs so a ``Task`` hashes) and ``output_schema``
    (for the families that read one), frozen by ``frozen``. Each family reads the options it knows
    (``threshold``, ``flat_ner``, ``hypothesis_template``...) with its own defaults."""

    labels: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    instruction: str | None = None
    output_schema: Any = None

    @classmethod
    def of(
        cls,
        labels: Sequence[str],
        options: Mapping[str, Any],
        instruction: str | None = None,
        output_schema: Mapping[str, Any] | None = None,
    ) -> Task:
        pairs = tuple(sorted((key, frozen(value)) for key, value in options.items()))
        return cls(
            tuple(labels), pairs, instruction, None if output_schema is None else frozen(output_schema)
        )

    def option(self, key: str, default: Any) -> Any:
        return next((value for name, value in self.options if name == key), default)


class FrozenMapping(tuple[tuple[Any, Any], ...]):
    """A mapping's (key, value) pairs in the client's order: a task's question order and a label
    group's order are what the model reads, so a mapping is not sorted (its keys need not even be
    comparable, as msgpack's may not be). It equals no plain tuple, so a list of pairs never batches
    with a mapping."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is FrozenMapping and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((FrozenMapping, tuple(self)))


# Levels of lists and mappings an option or output_schema may nest: far past any real one, and far
# below the interpreter's recursion limit (a client's 900 levels would otherwise be a 500).
MAX_NESTING: Final = 64


def frozen(value: Any, depth: int = 0) -> Any:
    """``value`` hashable: mappings as ``FrozenMapping``, lists as tuples (``thawed`` undoes it)."""
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_NESTING:
        raise UnsupportedInput(f"Request options and output_schema may nest at most {MAX_NESTING} levels")
    if isinstance(value, Mapping):
        return FrozenMapping((k, frozen(v, depth + 1)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(frozen(v, depth + 1) for v in value)
    return value


def thawed(value: Any) -> Any:
    """A frozen option as the client sent it: dicts and lists again."""
    if isinstance(value, FrozenMapping):
        return {k: thawed(v) for k, v in value}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value
