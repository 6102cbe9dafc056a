"""An extract request's ``output_schema`` as GLiFormer reads it, and its answer shaped back.

GLiFormer fills a JSON object from a *template* (``{"name": "str", "tags": ["str"], "people":
[{"who": "str"}]}``) with its structuring head, and answers single-choice questions with its
classification head. A client sends a JSON Schema instead (what Pydantic's ``model_json_schema``
writes), so this module reads the subset the two heads can answer, as the public server does:

- ``string`` properties, arrays of strings, nested objects and arrays of objects become the
  structuring template under ``$root`` (one object a document);
- string ``enum`` properties at the root become classification groups (one choice each; an ``enum``
  deeper down has no head to answer it and is refused);
- local ``$ref`` (``#/$defs/...``, ``#/definitions/...``, not recursive), nullable ``anyOf`` and
  ``["string", "null"]`` type lists are resolved; annotations (``title``, ``description``, ...) are
  read and ignored; any other keyword is refused with its path.

The answer keeps a property only when the model found a value: a string is the best of the values
found, an array of strings drops blank ones, and an object (or a record of an array) missing one of
its ``required`` properties is left out, as GLiFormer leaves out such records itself; a document
missing a ``required`` property of the root is that item's error (``missing_required``), with no
``data``, as the public server answers it. Nothing here imports the library, so the contract is
tested without a model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from sie.core.task import UnsupportedInput

# The template key GLiFormer decodes into a single object per document (not a list of records).
ROOT: Final = "$root"
STRING: Final = "str"
# The bound on every text that becomes prompt (labels, property names, choices): prompts are not
# billed, so each piece of one is bounded.
MAX_NAME_CHARS: Final = 128
# Properties, references followed and items in all: the same bound as a request's labels.
MAX_SCHEMA_ITEMS: Final = 1000
MAX_DEPTH: Final = 32
_ECHO_CHARS: Final = 120

_NOTES: Final = frozenset({"title", "description", "default", "examples"})
_OBJECT: Final = _NOTES | {"type", "properties", "required", "additionalProperties"}
_ROOT_OBJECT: Final = _OBJECT | {"$defs", "definitions", "$schema", "$id"}
_STRING: Final = _NOTES | {"type", "enum"}
_ARRAY: Final = _NOTES | {"type", "items"}
# Property names the library's template reader takes as its own descriptor words when an object has
# only these: such an object would not be read as fields.
_DESCRIPTOR_WORDS: Final = frozenset({"description", "children", "fields", "required_fields"})
_DESCRIPTOR_MARKS: Final = frozenset({"children", "fields", "required_fields"})


class FieldKind(Enum):
    STRING = "string"
    STRINGS = "array of strings"
    CHOICE = "enum"
    OBJECT = "object"
    RECORDS = "array of objects"


@dataclass(frozen=True)
class SchemaField:
    kind: FieldKind
    fields: tuple[tuple[str, SchemaField], ...] = ()  # an object's or a record's properties, in order
    required: frozenset[str] = frozenset()
    choices: tuple[str, ...] = ()  # an enum's


@dataclass(frozen=True)
class SchemaPlan:
    """What one ``output_schema`` asks of the model: the structuring ``template`` (``{"$root": ...}``,
    None when every property is a root enum) and the root enums as classification groups, in schema
    order; ``prompt_items`` counts what the prompt will carry (fields, groups and their choices)."""

    root: SchemaField
    template: dict[str, Any] | None
    choice_groups: dict[str, list[str]]
    prompt_items: int


def clip(text: str) -> str:
    """A client's text as an error message echoes it: at most 120 characters."""
    return text if len(text) <= _ECHO_CHARS else f"{text[:_ECHO_CHARS]}..."


def compile_schema(schema: Any) -> SchemaPlan:
    """The plan for ``schema``; ``UnsupportedInput`` names the first part outside the subset."""
    if not isinstance(schema, Mapping):
        raise UnsupportedInput("GLiFormer output_schema must be a JSON object")
    root = _Compiler(schema).root()
    template = _template(root)
    groups = {name: list(child.choices) for name, child in root.fields if child.kind is FieldKind.CHOICE}
    items = _field_count(root) + sum(len(choices) + 1 for choices in groups.values())
    return SchemaPlan(root, {ROOT: template} if template else None, groups, items)


def shape(plan: SchemaPlan, structured: Any, choices: Mapping[str, str]) -> dict[str, Any]:
    """One document's ``data``: the structuring head's ``$root`` object (``structured``) and the
    choice picked for each root enum, kept where the schema says (see the module docstring)."""
    found = structured if isinstance(structured, Mapping) else {}
    data: dict[str, Any] = {}
    for name, child in plan.root.fields:
        value = choices.get(name) if child.kind is FieldKind.CHOICE else _value(child, found.get(name))
        if value is not None:
            data[name] = value
    return data


def missing_required(plan: SchemaPlan, data: Mapping[str, Any]) -> list[str]:
    """The root's ``required`` properties ``data`` lacks (in the schema's order): a document with any
    is answered as its item's error, not with the properties that were found."""
    return [name for name, _ in plan.root.fields if name in plan.root.required and name not in data]


class _Compiler:
    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema = schema
        self._following: list[str] = []  # the $refs being compiled, to refuse a recursive schema
        self._spent = 0  # properties and references, against MAX_SCHEMA_ITEMS

    def root(self) -> SchemaField:
        with self._resolved(self._schema, "output_schema") as node:
            if node.get("type") != "object":
                raise UnsupportedInput("GLiFormer output_schema root type must be object")
            return self._object(node, "output_schema", 1, _ROOT_OBJECT, at_root=True)

    def _spend(self, what: str) -> None:
        self._spent += 1
        if self._spent > MAX_SCHEMA_ITEMS:
            raise UnsupportedInput(f"GLiFormer output_schema has more than {MAX_SCHEMA_ITEMS} {what}")

    @contextmanager
    def _resolved(self, node: Any, path: str) -> Iterator[Mapping[str, Any]]:
        """``node`` with a local ``$ref`` followed and a nullable union reduced to its type; the
        references followed stay marked while the caller compiles what they point at."""
        followed: list[str] = []
        try:
            yield self._resolve(node, path, followed)
        finally:
            del self._following[len(self._following) - len(followed) :]

    def _resolve(self, node: Any, path: str, followed: list[str]) -> Mapping[str, Any]:
        if not isinstance(node, Mapping):
            raise UnsupportedInput(f"GLiFormer {clip(path)} must be an object")
        notes = {key: node[key] for key in _NOTES if key in node}
        if "$ref" in node:
            _allow(node, _NOTES | {"$ref"}, path)
            ref = node["$ref"]
            if ref in self._following:
                raise UnsupportedInput(f"GLiFormer {clip(path)} is recursive, which is not supported")
            self._spend("$ref expansions")
            if len(self._following) >= MAX_DEPTH:
                raise UnsupportedInput(f"GLiFormer output_schema chains more than {MAX_DEPTH} $ref values")
            self._following.append(ref)
            followed.append(ref)
            return {**self._resolve(self._target(ref, path), path, followed), **notes}
        if "anyOf" in node:
            _allow(node, _NOTES | {"anyOf"}, path)
            options = node["anyOf"]
            kept = [one for one in options if one != {"type": "null"}] if isinstance(options, list) else []
            if not isinstance(options, list) or len(options) != 2 or len(kept) != 1:
                raise UnsupportedInput(
                    f"GLiFormer {clip(path)} supports anyOf only as an optional (nullable) type"
                )
            return {**self._resolve(kept[0], path, followed), **notes}
        kind = node.get("type")
        if isinstance(kind, list):
            named = [one for one in kind if one != "null"]
            if len(kind) != 2 or len(named) != 1:
                raise UnsupportedInput(f"GLiFormer {clip(path)} supports type lists only as an optional type")
            return {**node, "type": named[0]}
        return node

    def _target(self, ref: Any, path: str) -> Any:
        if isinstance(ref, str):
            for section in ("$defs", "definitions"):
                prefix = f"#/{section}/"
                table = self._schema.get(section)
                if ref.startswith(prefix) and isinstance(table, Mapping) and ref[len(prefix) :] in table:
                    return table[ref[len(prefix) :]]
        raise UnsupportedInput(f"GLiFormer {clip(path)} has an unresolvable $ref {clip(repr(ref))}")

    def _object(
        self, node: Mapping[str, Any], path: str, depth: int, allowed: frozenset[str], at_root: bool = False
    ) -> SchemaField:
        if depth > MAX_DEPTH:
            raise UnsupportedInput(f"GLiFormer output_schema nests objects more than {MAX_DEPTH} levels deep")
        _allow(node, allowed, path)
        properties = node.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            raise UnsupportedInput(f"GLiFormer {clip(path)} requires non-empty properties")
        if not isinstance(node.get("additionalProperties", True), bool):
            raise UnsupportedInput(f"GLiFormer {clip(path)} additionalProperties must be boolean")
        required = node.get("required", [])
        if (
            not isinstance(required, list)
            or any(not isinstance(name, str) or name not in properties for name in required)
            or len(set(required)) != len(required)
        ):
            raise UnsupportedInput(f"GLiFormer {clip(path)} required must list unique property names")
        names = set(properties)
        if names <= _DESCRIPTOR_WORDS and names & _DESCRIPTOR_MARKS:
            raise UnsupportedInput(
                f"GLiFormer {clip(path)} cannot consist only of properties named "
                f"{sorted(_DESCRIPTOR_WORDS)}; add another property or rename one"
            )
        fields = []
        for name, child in properties.items():
            if not isinstance(name, str) or not name.strip() or "." in name or len(name) > MAX_NAME_CHARS:
                raise UnsupportedInput(
                    f"GLiFormer {clip(path)} property names must be non-empty, contain no '.', "
                    f"and have at most {MAX_NAME_CHARS} characters"
                )
            self._spend("properties")
            child_path = f"{path}.{name}"
            with self._resolved(child, child_path) as resolved:
                fields.append((name, self._field(resolved, child_path, depth, at_root)))
        return SchemaField(FieldKind.OBJECT, tuple(fields), frozenset(required))

    def _field(self, node: Mapping[str, Any], path: str, depth: int, at_root: bool) -> SchemaField:
        kind = node.get("type")
        if "enum" in node:
            _allow(node, _STRING, path)
            if kind not in (None, "string"):
                raise UnsupportedInput(f"GLiFormer {clip(path)} enum must hold strings")
            if not at_root:
                raise UnsupportedInput(
                    f"GLiFormer {clip(path)}: enum properties are supported only at the schema root, "
                    "where they are answered by document-level classification"
                )
            return SchemaField(FieldKind.CHOICE, choices=_choices(node["enum"], path))
        if kind == "string":
            _allow(node, _STRING, path)
            return SchemaField(FieldKind.STRING)
        if kind == "object":
            return self._object(node, path, depth + 1, _OBJECT)
        if kind == "array":
            _allow(node, _ARRAY, path)
            with self._resolved(node.get("items"), f"{path}[]") as items:
                if "enum" in items:
                    raise UnsupportedInput(
                        f"GLiFormer {clip(path)}: arrays of enum values are not supported; "
                        "use a single-choice enum property"
                    )
                if items.get("type") == "string":
                    _allow(items, _STRING, f"{path}[]")
                    return SchemaField(FieldKind.STRINGS)
                if items.get("type") == "object":
                    record = self._object(items, f"{path}[]", depth + 1, _OBJECT)
                    return SchemaField(FieldKind.RECORDS, record.fields, record.required)
            raise UnsupportedInput(f"GLiFormer {clip(path)} arrays must hold strings or objects")
        raise UnsupportedInput(
            f"GLiFormer {clip(path)} supports string, string enum, object, and array of string or object values only"
        )


def _allow(node: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    extra = set(node) - allowed
    if extra:
        # Sorted as text: a msgpack schema's keys need not be strings, nor comparable with each other.
        named = sorted(extra, key=str)
        raise UnsupportedInput(f"GLiFormer {clip(path)} has unsupported keywords: {clip(str(named))}")


def _choices(values: Any, path: str) -> tuple[str, ...]:
    if (
        not isinstance(values, list)
        or not values
        or any(not isinstance(one, str) or not one.strip() or len(one) > MAX_NAME_CHARS for one in values)
        or len(set(values)) != len(values)
    ):
        raise UnsupportedInput(
            f"GLiFormer {clip(path)} enum must list unique non-empty strings of at most {MAX_NAME_CHARS} characters"
        )
    return tuple(values)


def _key(name: str) -> str:
    """A property name as a template key: the template reads a leading ``!`` as "required" and
    reserves a leading ``$``; doubled, either is the literal character."""
    return name[0] + name if name[0] in "!$" else name


def _template(node: SchemaField) -> dict[str, Any]:
    template: dict[str, Any] = {}
    for name, child in node.fields:
        if child.kind is FieldKind.STRING:
            template[_key(name)] = STRING
        elif child.kind is FieldKind.STRINGS:
            template[_key(name)] = [STRING]
        elif child.kind is FieldKind.OBJECT:
            template[_key(name)] = _template(child)
        elif child.kind is FieldKind.RECORDS:
            template[_key(name)] = [_template(child)]
    return template


def _field_count(node: SchemaField) -> int:
    return sum(1 + _field_count(child) for _, child in node.fields if child.kind is not FieldKind.CHOICE)


def _best(value: Any) -> Any:
    """The first of several values found for a single-valued field (the library lists every span it
    found, best first, and merges several root objects into lists of their values)."""
    while isinstance(value, list):
        value = next((one for one in value if one is not None), None)
    return value


def _value(node: SchemaField, value: Any) -> Any:
    """The schema-valid value of ``node``, or None when the model found none."""
    if node.kind in (FieldKind.STRING, FieldKind.OBJECT):
        value = _best(value)
    if value is None:
        return None
    if node.kind is FieldKind.STRING:
        return value if isinstance(value, str) and value.strip() else None
    if node.kind is FieldKind.STRINGS:
        values = value if isinstance(value, list) else [value]
        kept = [one for one in values if isinstance(one, str) and one.strip()]
        return kept or None
    if node.kind is FieldKind.OBJECT:
        return _record(node, value)
    records = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    shaped = [one for one in (_record(node, record) for record in records) if one is not None]
    return shaped or None


def _record(node: SchemaField, value: Any) -> dict[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    shaped = {}
    for name, child in node.fields:
        found = _value(child, value.get(name))
        if found is not None:
            shaped[name] = found
    if not shaped or any(name not in shaped for name in node.required):
        return None
    return shaped
