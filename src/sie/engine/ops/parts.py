"""What every operation is built from, and what it returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sie.core.options import Capability
from sie.engine.catalog import CatalogEntry
from sie.engine.errors import InvalidInput, PayloadTooLarge, require_items
from sie.engine.infer import Infer
from sie.engine.registry import Held, ModelRegistry
from sie.observability.metrics import Metrics
from sie.wire.requests import Item
from sie.wire.responses import Timing

R = TypeVar("R")


@dataclass(frozen=True)
class Answer(Generic[R]):
    """A wire response and what a front end reports beside it (timing headers, usage, metrics)."""

    response: R
    timing: Timing
    tokens: int


@dataclass(frozen=True)
class Parts:
    registry: ModelRegistry
    infer: Infer
    metrics: Metrics
    max_item_text_bytes: int

    def admitted(
        self,
        model: str,
        items: Sequence[Item],
        options: Mapping[str, Any] | None,
        query: Item | None = None,
    ) -> CatalogEntry:
        """The entry that serves a request (the variant its ``profile`` option names), once the
        request's own checks passed; nothing has touched a model yet."""
        self.admit(items, query)
        return self.registry.require(self.registry.variant(model, (options or {}).get("profile")))

    def admit(self, items: Sequence[Item], query: Item | None = None) -> None:
        """Every request's own checks, before any model work: items present, no text over
        ``SIE_MAX_ITEM_TEXT_BYTES`` (413)."""
        require_items(items)
        limit = self.max_item_text_bytes
        named = [("Query", query)] if query is not None else []
        for label, item in [*named, *((f"Item {i}", item) for i, item in enumerate(items))]:
            text = item.text
            # Four bytes a character at most: only a text that could pass the limit is encoded.
            if text is not None and len(text) * 4 > limit and len(text.encode()) > limit:
                raise PayloadTooLarge(
                    f"{label} text exceeds the limit of {limit} bytes (SIE_MAX_ITEM_TEXT_BYTES)"
                )

    def observe(self, model: str, operation: str, timing: Timing) -> None:
        """The request's phases into ``sie_request_duration_seconds`` (the front end adds ``total``)."""
        phases = {
            "queue": timing.queue_ms,
            "tokenize": timing.tokenization_ms,
            "inference": timing.inference_ms,
            "postprocess": timing.postprocessing_ms,
        }
        for phase, ms in phases.items():
            if ms is not None:
                self.metrics.request_duration.labels(model, operation, phase).observe(ms / 1000)


def check_outputs(held: Held, needed: frozenset[Capability]) -> None:
    """The loaded adapter gives every output asked for (the YAML was checked when planning)."""
    have = held.model.adapter.capabilities
    missing = needed - have
    if missing:
        raise InvalidInput(
            f"Model '{held.name}' does not support output types: {sorted(c.value for c in missing)}. "
            f"Supported: {sorted(c.value for c in have)}"
        )


def item_id(given: str | None, index: int) -> str:
    """Score and extract name an item without an id by its position, as the public server does."""
    return given if given is not None else f"item-{index}"
