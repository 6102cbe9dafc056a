"""An ``output_schema`` read as GLiFormer's template and classification questions, and its answers
shaped back into schema-valid ``data`` (no model: the template and the library's output shapes are
data)."""

from __future__ import annotations

from typing import Any

import pytest

from sie.adapters.gliformer.schema import MAX_DEPTH, FieldKind, compile_schema, missing_required, shape
from sie.core.task import UnsupportedInput


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


STRING = {"type": "string"}


def test_a_pydantic_schema_becomes_a_root_template_and_root_enums_questions() -> None:
    """What ``model_json_schema`` writes for a model with a nested record list, an optional field
    and a Literal: ``$defs`` references, a nullable ``anyOf``, annotations everywhere."""
    schema = {
        "$defs": {
            "Person": {
                "title": "Person",
                "type": "object",
                "properties": {
                    "name": {"title": "Name", "type": "string"},
                    "role": {"anyOf": [STRING, {"type": "null"}]},
                },
                "required": ["name"],
            }
        },
        "title": "Doc",
        "type": "object",
        "properties": {
            "title": {"title": "Title", "type": "string", "description": "the heading"},
            "people": {"type": "array", "items": {"$ref": "#/$defs/Person"}},
            "tags": {"type": ["array", "null"], "items": STRING},
            "tone": {"enum": ["formal", "casual"], "title": "Tone"},
            "!bang": STRING,
            "$dollar": STRING,
        },
        "required": ["title"],
    }
    plan = compile_schema(schema)
    assert plan.template == {
        "$root": {
            "title": "str",
            "people": [{"name": "str", "role": "str"}],
            "tags": ["str"],
            "!!bang": "str",  # a doubled marker is the literal name
            "$$dollar": "str",
        }
    }
    assert plan.choice_groups == {"tone": ["formal", "casual"]}
    assert [(name, field.kind) for name, field in plan.root.fields] == [
        ("title", FieldKind.STRING),
        ("people", FieldKind.RECORDS),
        ("tags", FieldKind.STRINGS),
        ("tone", FieldKind.CHOICE),
        ("!bang", FieldKind.STRING),
        ("$dollar", FieldKind.STRING),
    ]
    assert plan.root.required == {"title"}
    assert plan.prompt_items == 7 + 3  # seven fields, one question of two choices


def test_an_enum_only_schema_asks_no_structuring() -> None:
    plan = compile_schema(obj(tone={"type": "string", "enum": ["a", "b"]}))
    assert plan.template is None and plan.choice_groups == {"tone": ["a", "b"]}


def test_the_answer_keeps_what_was_found_and_the_best_of_several_values() -> None:
    plan = compile_schema(
        {
            **obj(
                name=STRING,
                tags={"type": "array", "items": STRING},
                people={
                    "type": "array",
                    "items": {**obj(who=STRING, where=STRING), "required": ["who"]},
                },
                home=obj(city=STRING),
                tone={"enum": ["formal", "casual"]},
                missing=STRING,
            ),
            "required": ["name"],
        }
    )
    structured = {
        "name": ["Ada", "Ada Lovelace"],  # several spans found: the first is the best
        "tags": ["x", " ", None, "y"],  # blanks dropped
        "people": [{"who": "Ada", "where": "London"}, {"where": "Paris"}, {"who": None}],  # no who: dropped
        "home": [{"city": "London"}, {"city": "Paris"}],  # the first object found
        "missing": None,
    }
    assert shape(plan, structured, {"tone": "formal"}) == {
        "name": "Ada",
        "tags": ["x", "y"],
        "people": [{"who": "Ada", "where": "London"}],
        "home": {"city": "London"},
        "tone": "formal",
    }
    assert shape(plan, {}, {}) == {}  # nothing found: no property at all
    assert shape(plan, {"name": "  ", "people": [{"where": "x"}], "tags": []}, {}) == {}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ([], "must be a JSON object"),
        ({"type": "array", "items": STRING}, "root type must be object"),
        ({"type": "object"}, "requires non-empty properties"),
        (obj(a={"type": "integer"}), r"output_schema\.a supports string, string enum"),
        (
            obj(a={"type": "string", "format": "date"}),
            r"output_schema\.a has unsupported keywords: \['format'\]",
        ),
        (obj(a={"enum": [1, 2]}), "enum must list unique non-empty strings"),
        (obj(a={"enum": ["x", "x"]}), "enum must list unique"),
        (obj(a={"type": "integer", "enum": [1]}), "enum must hold strings"),
        (obj(a=obj(b={"enum": ["x"]})), "only at the schema root"),
        (obj(a={"type": "array", "items": {"enum": ["x"]}}), "arrays of enum values are not supported"),
        (obj(a={"type": "array", "items": {"type": "number"}}), "arrays must hold strings or objects"),
        (obj(**{"a.b": STRING}), "contain no '.'"),
        (obj(**{"x" * 129: STRING}), "at most 128 characters"),
        (obj(a={"$ref": "#/$defs/Missing"}), "unresolvable \\$ref"),
        (obj(a={"$ref": "http://example.com/x"}), "unresolvable \\$ref"),
        (obj(a={"$ref": "#/$defs/A", "type": "string"}), "combines|unsupported keywords"),
        ({**obj(a={"$ref": "#/$defs/A"}), "$defs": {"A": obj(b={"$ref": "#/$defs/A"})}}, "is recursive"),
        (obj(a={"anyOf": [STRING, {"type": "integer"}]}), "anyOf only as an optional"),
        (obj(a={"type": ["string", "integer"]}), "type lists only as an optional type"),
        ({**obj(a=STRING), "required": ["b"]}, "required must list unique property names"),
        ({**obj(a=STRING), "additionalProperties": {}}, "additionalProperties must be boolean"),
        (obj(fields=STRING, children=STRING), "cannot consist only of properties named"),
    ],
)
def test_schemas_outside_the_subset_are_refused_with_their_path(schema: Any, message: str) -> None:
    with pytest.raises(UnsupportedInput, match=message):
        compile_schema(schema)


def test_nesting_and_size_are_bounded() -> None:
    deep: dict[str, Any] = STRING
    for _ in range(MAX_DEPTH + 1):
        deep = obj(a=deep)
    with pytest.raises(UnsupportedInput, match="nests objects more than 32 levels"):
        compile_schema(deep)
    with pytest.raises(UnsupportedInput, match="more than 1000 properties"):
        compile_schema(obj(**{f"p{i}": STRING for i in range(1001)}))
    # a shared definition referenced from many places expands each time, and is counted each time
    fan = {**obj(**{f"p{i}": {"$ref": "#/$defs/A"} for i in range(600)}), "$defs": {"A": obj(x=STRING)}}
    with pytest.raises(UnsupportedInput, match="more than 1000"):
        compile_schema(fan)


def test_keys_that_are_not_strings_are_refused_as_unsupported_keywords() -> None:
    """A msgpack schema may hold integer keys beside string ones: naming them sorted them, and an
    integer does not sort with a string (a TypeError, the server's 500)."""
    with pytest.raises(UnsupportedInput, match=r"output_schema\.a has unsupported keywords: \[1, 'zz'\]"):
        compile_schema(obj(a={"type": "string", 1: "x", "zz": 2}))


def test_a_document_missing_a_required_root_property_names_what_it_lacks() -> None:
    """The public server answers such a document as its item's error, with nothing in it: the
    adapter asks ``missing_required`` which of the root's required properties were not found."""
    plan = compile_schema(
        {**obj(name=STRING, city=STRING, tone={"enum": ["formal", "casual"]}), "required": ["name", "tone"]}
    )
    whole = shape(plan, {"name": "Ada", "city": "London"}, {"tone": "formal"})
    assert whole == {"name": "Ada", "city": "London", "tone": "formal"}
    assert missing_required(plan, whole) == []
    no_name = shape(plan, {"city": "London"}, {"tone": "formal"})
    assert missing_required(plan, no_name) == ["name"]
    no_choice = shape(plan, {"name": "Ada", "city": "London"}, {})  # no choice passed the threshold
    assert missing_required(plan, no_choice) == ["tone"]
    assert missing_required(plan, {}) == ["name", "tone"]
