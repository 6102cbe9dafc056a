"""What an extract request asks of GLiFormer's heads, and their answers as the public server gives them.

One request may ask several heads at once, each from its own field, as the public server reads it:

- ``labels`` are entity types (the NER head), unless ``options.classification_task`` names them the
  classes of one question, or the items carry ``metadata.entities``, when they are relation types;
- ``options.relation_labels`` (with entity ``labels``) asks the joint head for the relations between
  the entities it finds; ``options.relation_threshold`` raises the bar for relations alone;
- ``options.label_groups`` are named questions, answered as ``"group.label"`` classifications;
- ``output_schema`` is answered in ``data`` (``gliformer_schema``).

``threshold`` (0.5) applies to every head; a request that decodes spans needs at least 0.1 (below it
the candidate spans of a long document grow without bound), a classification-only one takes any.
Labels, relation types, group names and choices are unique, non-blank and at most 128 characters,
1,000 of them in all (the distinct labels of items' named entities included), 20 relation types at
most. The answers are the library's, sorted as the public
server sorts them: entities by position, relations by score (then relation, head, tail),
classifications by score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sie.adapters.batch import AnnotatedText
from sie.adapters.gliformer.schema import (
    MAX_NAME_CHARS,
    MAX_SCHEMA_ITEMS,
    SchemaPlan,
    clip,
    compile_schema,
    missing_required,
    shape,
)
from sie.adapters.options import finite_number, is_offset, unit_option
from sie.core.extraction import Classification, Entity, Extraction, ItemError, Relation
from sie.core.task import Task, UnsupportedInput, thawed
from sie.wire.errors import ErrorCode

FAMILY: Final = "GLiFormer"
DEFAULT_THRESHOLD: Final = 0.5
MIN_SPAN_THRESHOLD: Final = 0.1
MAX_RELATION_TYPES: Final = 20
# Distinct entity-type sets among a batch's ``metadata.entities``: each is a prompt of its own.
MAX_TYPE_SETS: Final = 64
NO_TASK: Final = "GLiFormer requires labels, label_groups, or output_schema for extraction"
TOO_MANY_ITEMS: Final = (
    f"GLiFormer requests may carry at most {MAX_SCHEMA_ITEMS} labels, relation types, class labels, "
    "and schema fields in total"
)


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list | tuple) or not value:
        raise UnsupportedInput(f"GLiFormer {name} must be a non-empty list")
    if len(value) > MAX_SCHEMA_ITEMS:
        raise UnsupportedInput(f"GLiFormer {name} must contain at most {MAX_SCHEMA_ITEMS} entries")
    if any(not isinstance(one, str) or not one.strip() for one in value):
        raise UnsupportedInput(f"GLiFormer {name} must be non-empty strings")
    stripped = [one.strip() for one in value]
    if any(len(one) > MAX_NAME_CHARS for one in stripped):
        raise UnsupportedInput(f"GLiFormer {name} may have at most {MAX_NAME_CHARS} characters each")
    if len(set(stripped)) != len(stripped):
        raise UnsupportedInput(f"GLiFormer {name} must be unique")
    return stripped


def _flag(task: Task, name: str, default: bool) -> bool:
    value = task.option(name, default)
    if not isinstance(value, bool):
        raise UnsupportedInput(f"GLiFormer {name} must be boolean")
    return bool(value)


def _multi_label(task: Task) -> bool:
    """``multi_label``, or GLiClass's ``classification_type`` spelling of it."""
    kind = task.option("classification_type", None)
    if kind is None:  # a null multi_label is the default, as the public server reads it
        return task.option("multi_label", None) is not None and _flag(task, "multi_label", False)
    if kind not in ("single-label", "multi-label"):
        raise UnsupportedInput("GLiFormer classification_type must be 'single-label' or 'multi-label'")
    multi = bool(kind == "multi-label")
    if task.option("multi_label", None) is not None and _flag(task, "multi_label", multi) != multi:
        raise UnsupportedInput("GLiFormer multi_label contradicts classification_type")
    return multi


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > MAX_NAME_CHARS:
        raise UnsupportedInput(
            f"GLiFormer {what} must be a non-empty string of at most {MAX_NAME_CHARS} characters"
        )
    return value.strip()


def _groups(raw: Any) -> dict[str, list[str]]:
    groups = thawed(raw)
    if not isinstance(groups, dict) or not groups:
        raise UnsupportedInput("GLiFormer label_groups must be a non-empty object of label lists")
    named: dict[str, list[str]] = {}
    for name, labels in groups.items():
        key = _name(name, "label_groups names")
        if key in named:
            raise UnsupportedInput("GLiFormer label_groups names must be unique")
        named[key] = _strings(labels, f"label_groups[{clip(repr(key))}]")
    return named


@dataclass(frozen=True)
class _Asked:
    """The fields of an extract task that ask GLiFormer's heads, each checked on its own."""

    task: Task
    labels: list[str] | None
    question: str | None  # ``options.classification_task``
    groups: dict[str, list[str]] | None  # ``options.label_groups``
    relations: list[str] | None  # ``options.relation_labels``
    schema: SchemaPlan | None

    @classmethod
    def of(cls, task: Task | None) -> _Asked:
        if task is None:
            raise UnsupportedInput(NO_TASK)
        if any(name == "relations" for name, _ in task.options):  # even null, as the public server
            raise UnsupportedInput(
                "GLiFormer takes relation types as options.relation_labels, not options.relations"
            )
        question = task.option("classification_task", None)
        groups = task.option("label_groups", None)
        relations = task.option("relation_labels", None)
        return cls(
            task,
            _strings(task.labels, "labels") if task.labels else None,
            None if question is None else _name(question, "classification_task"),
            None if groups is None else _groups(groups),
            None if relations in (None, [], ()) else _strings(relations, "relation_labels"),
            None if task.output_schema is None else compile_schema(thawed(task.output_schema)),
        )

    def questions(self) -> dict[str, list[str]]:
        """The classification head's questions: the task's, the label groups, the schema's enums."""
        classes: dict[str, list[str]] = {}
        if self.question is not None:
            if self.labels is None:
                raise UnsupportedInput("GLiFormer classification_task requires labels")
            if self.groups is not None:
                raise UnsupportedInput("GLiFormer label_groups cannot be combined with classification_task")
            classes[self.question] = self.labels
        if self.groups is not None:
            if self.schema is not None:
                raise UnsupportedInput(
                    "GLiFormer label_groups cannot be combined with output_schema; declare enum properties instead"
                )
            classes.update(self.groups)
        for name, choices in (self.schema.choice_groups if self.schema else {}).items():
            if name in classes:
                raise UnsupportedInput(
                    "GLiFormer classification_task must differ from output_schema enum property names"
                )
            classes[name] = choices
        return classes

    def roles(self, supplied: bool) -> tuple[list[str] | None, list[str] | None]:
        """The entity types and relation types the labels and options make, for items that name
        their entities (``supplied``: the labels are relation types) or not."""
        entity_types, relations = None, self.relations
        if supplied:
            if self.question is not None or relations is not None:
                raise UnsupportedInput(
                    "GLiFormer item metadata.entities cannot be combined with classification_task or relation_labels"
                )
            if self.labels is None:
                raise UnsupportedInput("GLiFormer relation extraction requires relation labels")
            relations = self.labels
        elif self.question is None:
            entity_types = self.labels
            if relations is not None and entity_types is None:
                raise UnsupportedInput("GLiFormer relation_labels require labels as entity types")
        elif relations is not None:
            raise UnsupportedInput("GLiFormer relation_labels cannot be combined with classification_task")
        if relations is not None and len(relations) > MAX_RELATION_TYPES:
            raise UnsupportedInput(
                f"GLiFormer relation extraction accepts at most {MAX_RELATION_TYPES} relation types"
            )
        return entity_types, relations


def _thresholds(task: Task, spans: bool, relations: bool) -> tuple[float, float | None]:
    """``threshold`` (at least 0.1 when spans are decoded) and ``relation_threshold`` (at least
    ``threshold``: the library decodes entities and relations with one threshold)."""
    threshold = unit_option(task, "threshold", DEFAULT_THRESHOLD, FAMILY)
    if spans and threshold < MIN_SPAN_THRESHOLD:
        raise UnsupportedInput(
            f"GLiFormer threshold must be at least {MIN_SPAN_THRESHOLD} when extracting entities, relations, "
            "or output_schema fields; classification-only requests accept any threshold"
        )
    if task.option("relation_threshold", None) is None:
        return threshold, None
    relation_threshold = unit_option(task, "relation_threshold", 0.0, FAMILY)
    if relations and relation_threshold < threshold:
        raise UnsupportedInput(
            "GLiFormer relation_threshold must be at least threshold: entities and relations are "
            "decoded with one threshold, so relation_threshold can only raise it for relations"
        )
    return threshold, relation_threshold


@dataclass(frozen=True)
class Plan:
    """One extract task read once: what each head is asked (``heads``) and how its answers are kept."""

    entity_types: list[str] | None  # the NER head's (or the joint head's) entity types
    relation_types: list[str] | None  # the joint head's; with supplied entities, the request's labels
    classes: dict[str, list[str]]  # the classification head's named questions
    question: str | None  # ``classification_task``: its classes come back as plain labels
    grouped: bool  # ``label_groups``: their classes come back as "group.label"
    schema: SchemaPlan | None
    supplied: bool  # relations between the entities each item names in ``metadata.entities``
    threshold: float
    relation_threshold: float | None
    flat_ner: bool
    multi_label: bool
    prompt_items: int = field(default=0)

    @classmethod
    def of(cls, task: Task | None, supplied: bool) -> Plan:
        """The plan of ``task`` for items that name entities (``supplied``) or not; raises
        ``UnsupportedInput`` with the public server's message for any request it cannot answer."""
        asked = _Asked.of(task)
        classes = asked.questions()
        entity_types, relations = asked.roles(supplied)
        if entity_types is None and not supplied and not classes and asked.schema is None:
            raise UnsupportedInput(NO_TASK)
        schema = asked.schema
        items = (
            len(entity_types or [])
            + len(relations or [])
            + sum(
                len(group) + 1
                for name, group in classes.items()
                if not schema or name not in schema.choice_groups
            )
            + (schema.prompt_items if schema else 0)
        )
        if items > MAX_SCHEMA_ITEMS:
            raise UnsupportedInput(TOO_MANY_ITEMS)
        spans = entity_types is not None or relations is not None or bool(schema and schema.template)
        threshold, relation_threshold = _thresholds(asked.task, spans, relations is not None)
        return cls(
            entity_types,
            relations,
            classes,
            asked.question,
            asked.groups is not None,
            schema,
            supplied,
            threshold,
            relation_threshold,
            _flag(asked.task, "flat_ner", True),
            _multi_label(asked.task),
            items,
        )

    def check_named_labels(self, labels: int) -> None:
        """Refuses a request whose items' ``metadata.entities`` carry ``labels`` distinct labels in all
        beyond what the budget leaves: each becomes prompt text, and the public server counts them."""
        if self.prompt_items + labels > MAX_SCHEMA_ITEMS:
            raise UnsupportedInput(TOO_MANY_ITEMS)

    def heads(self, entity_types: Sequence[str] | None) -> dict[str, Any]:
        """``GLiFormer.inference``'s task arguments for items prompted with ``entity_types`` (the
        request's, or the set an item's named entities carry)."""
        types = list(entity_types) if entity_types is not None else None
        joint = None
        if self.relation_types is not None:
            # An unnamed group shares the plain NER prompt: the joint head returns the entities it
            # finds and the relations between them.
            joint, types = {None: {"entities": types, "relations": list(self.relation_types)}}, None
        return {
            "entities": types,
            "classes": self.classes or None,
            "joint_relations": joint,
            "structures": self.schema.template if self.schema else None,
        }

    def answer(self, text: str, found: Mapping[str, Any], named: list[Entity] | None) -> Extraction:
        """One document's extraction from the library's row; ``named`` are the entities the item
        named (relations are kept only between them), None when the model finds its own."""
        entities = named if named is not None else _entities(text, found.get("ner") or [])
        allowed = None if named is None else {entity.text for entity in named}
        relations = _relations(found.get("joint_relex") or [], allowed, self.relation_threshold)
        groups = self._by_question(found.get("classification"))
        classifications: list[Classification] = []
        if self.question is not None:
            classifications = groups[self.question]
        if self.grouped:
            picked = [
                Classification(f"{name}.{one.label}", one.score)
                for name in self.classes  # label groups never come with a schema's questions
                for one in groups[name]
            ]
            classifications = sorted(picked, key=lambda one: -one.score)
        data: dict[str, Any] = {}
        if self.schema is not None:
            choices = {name: groups[name][0].label for name in self.schema.choice_groups if groups[name]}
            data = shape(self.schema, found.get("structuring"), choices)
            lacking = missing_required(self.schema, data)
            if lacking:  # this item alone, as the public server answers it: nothing but why
                return Extraction(
                    error=ItemError(
                        ErrorCode.INFERENCE_ERROR.value,
                        f"GLiFormer did not extract required output_schema properties: {clip(str(lacking))}",
                    )
                )
        return Extraction(entities=entities, relations=relations, classifications=classifications, data=data)

    def _by_question(self, raw: Any) -> dict[str, list[Classification]]:
        """The classification head's answers (a list per question, in the order asked), by question."""
        rows = raw if isinstance(raw, list) and len(raw) == len(self.classes) else [[] for _ in self.classes]
        named: dict[str, list[Classification]] = {}
        for (name, labels), row in zip(self.classes.items(), rows, strict=True):
            kept = [
                Classification(str(one["class_name"]), float(one["score"]))
                for one in row or []
                if isinstance(one, Mapping) and one.get("class_name") in labels
            ]
            named[name] = sorted(kept, key=lambda one: -one.score)
        return named


def _entities(text: str, found: Sequence[Mapping[str, Any]]) -> list[Entity]:
    entities = [
        Entity(
            text[one["start"] : one["end"]], str(one["label"]), float(one["score"]), one["start"], one["end"]
        )
        for one in found
        if is_offset(one.get("start"))
        and is_offset(one.get("end"))
        and 0 <= one["start"] < one["end"] <= len(text)
    ]
    return sorted(entities, key=lambda entity: (entity.start or 0, entity.end or 0))


def _relations(
    found: Sequence[Mapping[str, Any]], allowed: set[str] | None, floor: float | None
) -> list[Relation]:
    relations = []
    for one in found:
        head, tail = one["head"]["text"], one["tail"]["text"]
        if allowed is not None and (head not in allowed or tail not in allowed):
            continue  # the joint head finds its own spans; with named entities only those count
        score = float(one["score"])
        if floor is not None and score <= floor:
            continue  # the library's own comparison for ``threshold``
        relations.append(Relation(str(head), str(tail), str(one["relation"]), score))
    return sorted(relations, key=lambda one: (-one.score, one.relation, one.head, one.tail))


def named_entities(item: AnnotatedText) -> list[Entity] | None:
    """The entities an item names in ``metadata.entities`` (None when it names none), each checked:
    character offsets of the item's text, ``text`` equal to the span, a label (``ENTITY`` when none)."""
    raw = item.metadata.get("entities")
    if raw is None:
        return None
    if not isinstance(raw, list | tuple) or not raw:
        raise UnsupportedInput(
            "GLiFormer relation extraction requires non-empty entities in every item metadata"
        )
    if len(raw) > MAX_SCHEMA_ITEMS:
        raise UnsupportedInput(f"GLiFormer item metadata may carry at most {MAX_SCHEMA_ITEMS} entities")
    return [_named(item.text, thawed(one)) for one in raw]


def _named(text: str, raw: Any) -> Entity:
    if not isinstance(raw, dict):
        raise UnsupportedInput("GLiFormer relation entities must be objects")
    start, end, span, label = raw.get("start"), raw.get("end"), raw.get("text"), raw.get("label", "ENTITY")
    if (
        not is_offset(start)
        or not is_offset(end)
        or not isinstance(span, str)
        or not isinstance(label, str)
        or not label.strip()
        or not 0 <= start < end <= len(text)
        or text[start:end] != span
    ):
        raise UnsupportedInput("GLiFormer relation entities require valid character offsets")
    if len(label.strip()) > MAX_NAME_CHARS:
        raise UnsupportedInput(
            f"GLiFormer relation entity labels may have at most {MAX_NAME_CHARS} characters"
        )
    score = finite_number(raw.get("score", 1.0))
    if not (math.isfinite(score) and 0 <= score <= 1):
        raise UnsupportedInput("GLiFormer relation entity score must be a number between 0 and 1")
    return Entity(span, label.strip(), score, start, end)
