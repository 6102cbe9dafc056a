"""What extraction produces, shared by the adapters that make it and the wire that carries it.

The public result of every extraction family has the same five parts (entities, relations,
classifications, objects, structured ``data``), whichever of them a family fills, so one type serves
GLiNER, token-classification NER, zero-shot classification and what comes later. Field order is the
public server's byte order.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Entity(msgspec.Struct):
    """A span of the text (``start``/``end`` are character offsets, ``text[start:end]`` is ``text``, but
    for the entities a client named, which GLiREL echoes as named) or a region of an image (``bbox``)."""

    text: str
    label: str
    score: float
    start: int | None = None
    end: int | None = None
    bbox: list[int] | None = None


class Relation(msgspec.Struct):
    head: str
    tail: str
    relation: str
    score: float


class Classification(msgspec.Struct):
    label: str
    score: float


class DetectedObject(msgspec.Struct):
    label: str
    score: float
    bbox: list[int]


class ItemError(msgspec.Struct):
    """Why one item of a batch has no extraction (``code`` is a public error code such as
    ``INPUT_TOO_LONG``): the public server answers the other items and carries this on the failed one,
    billed 0, instead of failing the whole request."""

    code: str
    message: str


class Extraction(msgspec.Struct):
    """One item's extraction; a family leaves the parts it does not produce empty, and sets ``error``
    (and nothing else) on an item it could not extract."""

    entities: list[Entity] = msgspec.field(default_factory=list)
    relations: list[Relation] = msgspec.field(default_factory=list)
    classifications: list[Classification] = msgspec.field(default_factory=list)
    objects: list[DetectedObject] = msgspec.field(default_factory=list)
    data: dict[str, Any] = msgspec.field(default_factory=dict)
    error: ItemError | None = None
