"""What every operation is built from, and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sie.adapters.loading import custom_options
from sie.catalog.admission import Admission, RequestLimits
from sie.catalog.errors import InvalidInput
from sie.core.options import Capability
from sie.engine.infer import Infer
from sie.engine.registry import Held, ModelRegistry
from sie.observability.metrics import Metrics
from sie.wire.responses import Timing

R = TypeVar("R")


@dataclass(frozen=True)
class Answer(Generic[R]):
    """A wire response and what a front end reports beside it (timing headers, usage, metrics)."""

    response: R
    timing: Timing
    tokens: int
    item_tokens: tuple[int, ...] = ()  # each item's share of ``tokens``, in request order (encode)


@dataclass(frozen=True)
class Parts:
    registry: ModelRegistry
    infer: Infer
    metrics: Metrics
    limits: RequestLimits
    # The catalogue's ``Admission``, kept while that catalogue is the registry's: it keeps the plans
    # it made (``Admission.planned``).
    _admission: list[Admission] = field(default_factory=list, compare=False, repr=False)

    @property
    def admission(self) -> Admission:
        """The request checks against the catalogue as it is now (hot reload replaces it)."""
        catalog, kept = self.registry.catalog, self._admission
        if not kept or kept[0].catalog is not catalog:
            kept[:] = [Admission(catalog, self.limits, custom_options)]
        return kept[0]

    def observe(self, model: str, operation: str, timing: Timing) -> None:
        """The request's phases into ``sie_request_duration_seconds`` (the front end adds ``total``)."""
        phases = {
            "queue": timing.queue_ms,
            "tokenize": timing.tokenization_ms,
            "inference": timing.inference_ms,
            "postprocess": timing.postprocessing_ms,
        }
        metrics = self.metrics
        for phase, ms in phases.items():
            if ms is not None:
                metrics.labelled(metrics.request_duration, model, operation, phase).observe(ms / 1000)


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
